use actix_web::{get, post, put, web, HttpResponse};

use super::auth::Admin;
use super::views::{SettingsView, UserView};
use super::JsonObject;
use crate::domain::parse_id;
use crate::engine::{Engine, SettingsPatch};
use crate::error::AppError;
use crate::types::UserId;

/// The admin settings.
#[utoipa::path(
    tag = "admin",
    operation_id = "get_settings",
    responses(
        (status = 200, description = "The settings", body = SettingsView),
        (status = 403, description = "Not an admin", body = super::errors::ErrorBody),
    )
)]
#[get("/admin/settings")]
pub async fn get_settings(
    _admin: Admin,
    engine: web::Data<Engine>,
) -> Result<HttpResponse, AppError> {
    let settings = engine.stored_settings().await?;
    Ok(HttpResponse::Ok().json(SettingsView::from(&settings)))
}

/// Changes any subset of the settings: validated as a whole, persisted,
/// live on every instance within a second.
#[utoipa::path(
    tag = "admin",
    operation_id = "put_settings",
    request_body = SettingsPatch,
    responses(
        (status = 200, description = "The settings now", body = SettingsView),
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
    Ok(HttpResponse::Ok().json(SettingsView::from(&settings)))
}

/// Suspends an account: its posts leave every feed when this returns (and
/// its author page shows none); it cannot post, follow, mute or block
/// (403) until unsuspended. Idempotent.
#[utoipa::path(
    tag = "admin",
    operation_id = "suspend_user",
    params(("id" = i64, Path, description = "The account", minimum = 1)),
    responses(
        (status = 200, description = "The account, suspended", body = UserView),
        (status = 403, description = "Not an admin", body = super::errors::ErrorBody),
        (status = 404, description = "No such account", body = super::errors::ErrorBody),
    )
)]
#[post("/admin/users/{id}/suspend")]
pub async fn suspend(
    _admin: Admin,
    engine: web::Data<Engine>,
    path: web::Path<String>,
) -> Result<HttpResponse, AppError> {
    let id = parse_id(&path, "user id").map_err(AppError::BadRequest)?;
    let user = engine.accounts().suspend(UserId(id), true).await?;
    Ok(HttpResponse::Ok().json(UserView::from(&user)))
}

/// Lifts an account's suspension: its posts are back in every feed when
/// this returns. Idempotent.
#[utoipa::path(
    tag = "admin",
    operation_id = "unsuspend_user",
    params(("id" = i64, Path, description = "The account", minimum = 1)),
    responses(
        (status = 200, description = "The account, active", body = UserView),
        (status = 403, description = "Not an admin", body = super::errors::ErrorBody),
        (status = 404, description = "No such account", body = super::errors::ErrorBody),
    )
)]
#[post("/admin/users/{id}/unsuspend")]
pub async fn unsuspend(
    _admin: Admin,
    engine: web::Data<Engine>,
    path: web::Path<String>,
) -> Result<HttpResponse, AppError> {
    let id = parse_id(&path, "user id").map_err(AppError::BadRequest)?;
    let user = engine.accounts().suspend(UserId(id), false).await?;
    Ok(HttpResponse::Ok().json(UserView::from(&user)))
}
