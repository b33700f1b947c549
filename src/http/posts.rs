use actix_web::{web, HttpResponse};
use serde::Deserialize;

use super::auth::Caller;
use super::JsonObject;
use crate::domain::{parse_id, PostBody};
use crate::engine::Engine;
use crate::error::AppError;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewPostBody {
    body: String,
}

pub async fn create(
    caller: Caller,
    engine: web::Data<Engine>,
    JsonObject(body): JsonObject<NewPostBody>,
) -> Result<HttpResponse, AppError> {
    let text = PostBody::parse(&body.body).map_err(AppError::Unprocessable)?;
    let post = engine.publish(caller.id, &text).await?;
    Ok(HttpResponse::Created().json(post))
}

pub async fn get(
    _caller: Caller,
    engine: web::Data<Engine>,
    path: web::Path<String>,
) -> Result<HttpResponse, AppError> {
    let id = parse_id(&path, "post id").map_err(AppError::BadRequest)?;
    Ok(HttpResponse::Ok().json(engine.post(id).await?))
}

pub async fn delete(
    caller: Caller,
    engine: web::Data<Engine>,
    path: web::Path<String>,
) -> Result<HttpResponse, AppError> {
    let id = parse_id(&path, "post id").map_err(AppError::BadRequest)?;
    let actor = (!caller.admin).then_some(caller.id);
    engine.delete_post(id, actor).await?;
    Ok(HttpResponse::NoContent().finish())
}
