use actix_web::{web, HttpResponse};
use serde::Deserialize;

use super::auth::{Admin, Caller};
use super::{JsonObject, PageQuery};
use crate::domain::{parse_id, Username};
use crate::engine::Engine;
use crate::error::AppError;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewUserBody {
    username: String,
}

fn id(raw: &str, what: &str) -> Result<i64, AppError> {
    parse_id(raw, what).map_err(AppError::BadRequest)
}

pub async fn create(
    _admin: Admin,
    engine: web::Data<Engine>,
    JsonObject(body): JsonObject<NewUserBody>,
) -> Result<HttpResponse, AppError> {
    let username = Username::parse(&body.username).map_err(AppError::Unprocessable)?;
    let user = engine.create_user(&username).await?;
    Ok(HttpResponse::Created().json(user))
}

pub async fn get(
    _caller: Caller,
    engine: web::Data<Engine>,
    path: web::Path<String>,
) -> Result<HttpResponse, AppError> {
    let user = engine.user(id(&path, "user id")?).await?;
    Ok(HttpResponse::Ok().json(user))
}

/// The (follower, target) of a following route, once the caller may act
/// for the follower.
fn edge(caller: &Caller, path: &(String, String)) -> Result<(i64, i64), AppError> {
    let follower = id(&path.0, "user id")?;
    let target = id(&path.1, "target user id")?;
    caller.may_act_for(follower)?;
    Ok((follower, target))
}

pub async fn follow(
    caller: Caller,
    engine: web::Data<Engine>,
    path: web::Path<(String, String)>,
) -> Result<HttpResponse, AppError> {
    let (follower, target) = edge(&caller, &path)?;
    engine.follow(follower, target).await?;
    Ok(HttpResponse::NoContent().finish())
}

pub async fn unfollow(
    caller: Caller,
    engine: web::Data<Engine>,
    path: web::Path<(String, String)>,
) -> Result<HttpResponse, AppError> {
    let (follower, target) = edge(&caller, &path)?;
    engine.unfollow(follower, target).await?;
    Ok(HttpResponse::NoContent().finish())
}

pub async fn posts(
    _caller: Caller,
    engine: web::Data<Engine>,
    path: web::Path<String>,
    query: web::Query<PageQuery>,
) -> Result<HttpResponse, AppError> {
    let author = id(&path, "user id")?;
    let req = query.parse()?;
    let page = engine.author_page(author, req).await?;
    Ok(HttpResponse::Ok().json(page))
}
