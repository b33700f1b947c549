use actix_web::{get, put, web, HttpResponse};

use super::auth::Admin;
use super::JsonObject;
use crate::engine::{Engine, FeedSettings, SettingsPatch};
use crate::error::AppError;

/// The admin settings.
#[utoipa::path(
    tag = "admin",
    operation_id = "get_settings",
    responses(
        (status = 200, description = "The settings", body = FeedSettings),
        (status = 403, description = "Not an admin", body = super::errors::ErrorBody),
    )
)]
#[get("/admin/settings")]
pub async fn get_settings(
    _admin: Admin,
    engine: web::Data<Engine>,
) -> Result<HttpResponse, AppError> {
    let settings = engine.pg().settings().await?;
    Ok(HttpResponse::Ok().json(settings))
}

/// Changes any subset of the settings: validated as a whole, persisted,
/// live on every instance within a second.
#[utoipa::path(
    tag = "admin",
    operation_id = "put_settings",
    request_body = SettingsPatch,
    responses(
        (status = 200, description = "The settings now", body = FeedSettings),
        (status = 403, description = "Not an admin", body = super::errors::ErrorBody),
        (status = 422, description = "Invalid settings", body = super::errors::ErrorBody),
    )
)]
#[put("/admin/settings")]
pub async fn put_settings(
    _admin: Admin,
    engine: web::Data<Engine>,
    JsonObject(patch): JsonObject<SettingsPatch>,
) -> Result<HttpResponse, AppError> {
    let settings = engine.update_settings(&patch).await?;
    Ok(HttpResponse::Ok().json(settings))
}
