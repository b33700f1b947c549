use actix_web::{web, HttpResponse};

use super::auth::Admin;
use super::JsonObject;
use crate::engine::{Engine, SettingsPatch};
use crate::error::AppError;

pub async fn get_settings(
    _admin: Admin,
    engine: web::Data<Engine>,
) -> Result<HttpResponse, AppError> {
    let settings = engine.pg().settings().await?;
    Ok(HttpResponse::Ok().json(settings))
}

pub async fn put_settings(
    _admin: Admin,
    engine: web::Data<Engine>,
    JsonObject(patch): JsonObject<SettingsPatch>,
) -> Result<HttpResponse, AppError> {
    let settings = engine.update_settings(&patch).await?;
    Ok(HttpResponse::Ok().json(settings))
}
