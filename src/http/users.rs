use actix_web::{delete, get, post, put, web, HttpResponse};
use serde::Deserialize;

use super::auth::{Admin, Caller, Token};
use super::errors::{read_body, ErrorBody};
use super::views::{FollowedView, PageView, TaskView, UserView};
use super::{JsonObject, PageQuery};
use crate::domain::{parse_id, Username};
use crate::engine::{Engine, MAX_IMPORT};
use crate::error::AppError;
use crate::types::UserId;

/// A new user.
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"username": "alice"}))]
pub struct NewUserBody {
    /// 1 to 32 characters of `[a-z0-9_]`.
    #[schema(min_length = 1, max_length = 32, pattern = "^[a-z0-9_]{1,32}$")]
    username: String,
}

pub(super) fn id(raw: &str, what: &str) -> Result<UserId, AppError> {
    parse_id(raw, what)
        .map(UserId)
        .map_err(AppError::BadRequest)
}

/// Creates a user (admin).
#[utoipa::path(
    tag = "users",
    operation_id = "create_user",
    request_body = NewUserBody,
    responses(
        (status = 201, description = "The user", body = UserView, links(
            ("GetUser" = (operation_id = "get_user", parameters(("id" = "$response.body#/id")))),
            ("Follow" = (operation_id = "follow", parameters(("target" = "$response.body#/id")))),
            ("UserPosts" = (operation_id = "user_posts", parameters(("id" = "$response.body#/id")))),
            ("Mute" = (operation_id = "mute", parameters(("target" = "$response.body#/id")))),
            ("Block" = (operation_id = "block", parameters(("target" = "$response.body#/id")))),
            ("Suspend" = (operation_id = "suspend_user", parameters(("id" = "$response.body#/id")))),
            ("DeleteUser" = (operation_id = "delete_user", parameters(("id" = "$response.body#/id")))),
        )),
        (status = 403, description = "Not an admin", body = ErrorBody),
        (status = 409, description = "Username taken", body = ErrorBody),
        (status = 422, description = "Invalid username", body = ErrorBody),
    )
)]
#[post("/users")]
pub async fn create(
    _admin: Admin,
    engine: web::Data<Engine>,
    JsonObject(body): JsonObject<NewUserBody>,
) -> Result<HttpResponse, AppError> {
    let username = Username::parse(&body.username).map_err(AppError::Unprocessable)?;
    let user = engine.create_user(&username).await?;
    Ok(HttpResponse::Created().json(UserView::from(&user)))
}

/// A user.
#[utoipa::path(
    tag = "users",
    operation_id = "get_user",
    params(("id" = i64, Path, description = "User id", minimum = 1)),
    responses(
        (status = 200, description = "The user", body = UserView),
        (status = 404, description = "No such user", body = ErrorBody),
    )
)]
#[get("/users/{id}")]
pub async fn get(
    _caller: Caller,
    engine: web::Data<Engine>,
    path: web::Path<String>,
) -> Result<HttpResponse, AppError> {
    let user = engine.user(id(&path, "user id")?).await?;
    Ok(HttpResponse::Ok().json(UserView::from(&user)))
}

/// Deletes an account (the user itself, or an admin): its posts leave every
/// feed when this returns; its follows (either way), posts and cached
/// state go in the background, a job whose progress `GET
/// /api/v1/jobs/{id}` shows (also in `Location`). A repeated call answers
/// the same job.
#[utoipa::path(
    tag = "users",
    operation_id = "delete_user",
    params(("id" = i64, Path, description = "The account (the caller's, unless admin)", minimum = 1)),
    responses(
        (status = 202, description = "Deleting: the job", body = TaskView,
            headers(("Location" = String, description = "The job's URL")),
            links(("GetJob" = (operation_id = "get_job", parameters(("id" = "$response.body#/id")))))),
        (status = 403, description = "Acting for another user", body = ErrorBody),
        (status = 404, description = "No such user", body = ErrorBody),
    )
)]
#[delete("/users/{id}")]
pub async fn delete(
    Token(caller): Token,
    engine: web::Data<Engine>,
    path: web::Path<String>,
) -> Result<HttpResponse, AppError> {
    let user = id(&path, "user id")?;
    caller.may_act_for(user)?;
    let task = engine.accounts().delete_account(user).await?;
    Ok(HttpResponse::Accepted()
        .insert_header(("Location", format!("/api/v1/jobs/{}", task.id)))
        .json(TaskView::from(&task)))
}

/// The (user, target) of a route between two users (a follow, a mute, a
/// block), once the caller may act for the user.
pub(super) fn edge(caller: &Caller, path: &(String, String)) -> Result<(UserId, UserId), AppError> {
    let follower = id(&path.0, "user id")?;
    let target = id(&path.1, "target user id")?;
    caller.may_act_for(follower)?;
    Ok((follower, target))
}

/// User `id` follows `target` (idempotent).
#[utoipa::path(
    tag = "users",
    operation_id = "follow",
    params(
        ("id" = i64, Path, description = "The follower (the caller, unless admin)", minimum = 1),
        ("target" = i64, Path, description = "The user to follow", minimum = 1),
    ),
    responses(
        (status = 204, description = "Following"),
        (status = 403, description = "Acting for another user", body = ErrorBody),
        (status = 404, description = "No such user", body = ErrorBody),
        (status = 422, description = "A user cannot follow itself", body = ErrorBody),
    )
)]
#[put("/users/{id}/following/{target}")]
pub async fn follow(
    caller: Caller,
    engine: web::Data<Engine>,
    path: web::Path<(String, String)>,
) -> Result<HttpResponse, AppError> {
    let (follower, target) = edge(&caller, &path)?;
    engine.relations().follow(follower, target).await?;
    Ok(HttpResponse::NoContent().finish())
}

/// The authors a follow of many names.
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"ids": [7, 9, 12]}))]
pub struct Targets {
    /// User ids (1 to 1,000 at once; up to 1,000,000 in an import).
    #[schema(value_type = Vec<i64>)]
    ids: Vec<UserId>,
}

/// User `id` follows up to 1,000 authors at once: one transaction, each
/// author's newest posts (the admin's `follow_copy_limit`) in its home
/// when this returns. Ids it cannot follow (unknown, itself, suspended,
/// across a block) are skipped and named; past `max_follows` nothing
/// changes (422).
#[utoipa::path(
    tag = "users",
    operation_id = "follow_many",
    params(("id" = i64, Path, description = "The follower (the caller, unless admin)", minimum = 1)),
    request_body = Targets,
    responses(
        (status = 200, description = "Followed now, before, and skipped", body = FollowedView),
        (status = 403, description = "Acting for another user, or suspended", body = ErrorBody),
        (status = 404, description = "No such user", body = ErrorBody),
        (status = 422, description = "No id or more than 1,000, or past max_follows", body = ErrorBody),
    )
)]
#[put("/users/{id}/following")]
pub async fn follow_many(
    caller: Caller,
    engine: web::Data<Engine>,
    path: web::Path<String>,
    JsonObject(body): JsonObject<Targets>,
) -> Result<HttpResponse, AppError> {
    let follower = id(&path, "user id")?;
    caller.may_act_for(follower)?;
    let followed = engine.relations().follow_many(follower, &body.ids).await?;
    Ok(HttpResponse::Ok().json(FollowedView::from(&followed)))
}

/// An import's body may be this large (a million ids).
const MAX_IMPORT_BYTES: usize = 24 * 1024 * 1024;

/// User `id` imports a follow list of any length (up to 1,000,000 ids) as
/// a job (`Location`): followed 1,000 at a time, the ids it cannot follow
/// skipped, and the rest once `max_follows` is reached. The body may be up
/// to 24 MiB. At most `feed.imports_per_user` imports of one user are
/// queued or running at once (one more: 429, before its body is read).
#[utoipa::path(
    tag = "users",
    operation_id = "import_follows",
    params(("id" = i64, Path, description = "The follower (the caller, unless admin)", minimum = 1)),
    request_body = Targets,
    responses(
        (status = 202, description = "Importing: the job", body = TaskView,
            headers(("Location" = String, description = "The job's URL")),
            links(("GetJob" = (operation_id = "get_job", parameters(("id" = "$response.body#/id")))))),
        (status = 403, description = "Acting for another user, or suspended", body = ErrorBody),
        (status = 404, description = "No such user", body = ErrorBody),
        (status = 408, description = "The body arrived too slowly", body = ErrorBody),
        (status = 413, description = "A body over 24 MiB", body = ErrorBody),
        (status = 422, description = "No id, or more than 1,000,000", body = ErrorBody),
        (status = 429, description = "Too many imports of this user queued or running, or requests", body = ErrorBody),
        (status = 503, description = "Other imports are being read, or a store is down", body = ErrorBody),
    )
)]
#[post("/users/{id}/imports")]
pub async fn import(
    caller: Caller,
    engine: web::Data<Engine>,
    path: web::Path<String>,
    payload: web::Payload,
) -> Result<HttpResponse, AppError> {
    let follower = id(&path, "user id")?;
    caller.may_act_for(follower)?;
    // Refused before a byte of the body is read.
    engine.relations().import_room(follower).await?;
    let _reading = reading_import().await?;
    let body = read_body(payload, MAX_IMPORT_BYTES).await?;
    let ids = ImportIds::parse(&body)?;
    drop(body);
    if ids.total > MAX_IMPORT {
        return Err(AppError::Unprocessable(format!(
            "from 1 to {MAX_IMPORT} ids in one import, got {}",
            ids.total
        )));
    }
    let task = engine
        .relations()
        .import_follows(follower, &ids.ids)
        .await?;
    Ok(HttpResponse::Accepted()
        .insert_header(("Location", format!("/api/v1/jobs/{}", task.id)))
        .json(TaskView::from(&task)))
}

/// Import bodies read at once by this instance: each may take its 24 MiB
/// and 8 MB of ids while it is parsed.
const IMPORTS_READ_AT_ONCE: usize = 2;

/// A turn to read an import's body, waited for a few seconds at most (503
/// past them).
async fn reading_import() -> Result<tokio::sync::SemaphorePermit<'static>, AppError> {
    static READING: tokio::sync::Semaphore =
        tokio::sync::Semaphore::const_new(IMPORTS_READ_AT_ONCE);
    match tokio::time::timeout(std::time::Duration::from_secs(10), READING.acquire()).await {
        Ok(Ok(turn)) => Ok(turn),
        _ => Err(AppError::Overloaded {
            message: "other imports are being read: retry in a moment".into(),
            retry_after_secs: 5,
        }),
    }
}

/// An import's body, `{"ids": [...]}`, read straight into its ids: no
/// document tree (a million ids take their 8 MB, not the tens of MB of a
/// JSON value), and no more than [`MAX_IMPORT`] of them kept however many
/// the body holds (`total` counts them all).
struct ImportIds {
    ids: Vec<UserId>,
    total: usize,
}

impl ImportIds {
    fn parse(body: &[u8]) -> Result<Self, AppError> {
        let mut de = serde_json::Deserializer::from_slice(body);
        let ids = serde::Deserialize::deserialize(&mut de)
            .and_then(|ids| de.end().map(|()| ids))
            .map_err(|e| AppError::BadRequest(format!("invalid JSON body: {e}")))?;
        Ok(ids)
    }
}

impl<'de> serde::Deserialize<'de> for ImportIds {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::{Error, IgnoredAny, MapAccess, SeqAccess, Visitor};
        struct Body;
        struct Ids;
        impl<'de> Visitor<'de> for Ids {
            type Value = ImportIds;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an array of user ids")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<ImportIds, A::Error> {
                let mut ids = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(1 << 16));
                let mut total = 0;
                while total < MAX_IMPORT {
                    match seq.next_element::<UserId>()? {
                        Some(id) => ids.push(id),
                        None => return Ok(ImportIds { ids, total }),
                    }
                    total += 1;
                }
                // Past the most: counted, not kept.
                while seq.next_element::<IgnoredAny>()?.is_some() {
                    total += 1;
                }
                Ok(ImportIds { ids, total })
            }
        }
        impl<'de> Visitor<'de> for Body {
            type Value = ImportIds;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str(r#"a JSON object {"ids": [...]}"#)
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<ImportIds, A::Error> {
                let mut found = None;
                while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
                    if key != "ids" {
                        return Err(A::Error::unknown_field(&key, &["ids"]));
                    }
                    if found.is_some() {
                        return Err(A::Error::duplicate_field("ids"));
                    }
                    found = Some(map.next_value_seed(IdsSeed)?);
                }
                found.ok_or_else(|| A::Error::missing_field("ids"))
            }
        }
        struct IdsSeed;
        impl<'de> serde::de::DeserializeSeed<'de> for IdsSeed {
            type Value = ImportIds;
            fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<ImportIds, D::Error> {
                d.deserialize_seq(Ids)
            }
        }
        d.deserialize_map(Body)
    }
}

/// User `id` stops following `target` (idempotent). No page shows the
/// target's posts to it once this returns.
#[utoipa::path(
    tag = "users",
    operation_id = "unfollow",
    params(
        ("id" = i64, Path, description = "The follower (the caller, unless admin)", minimum = 1),
        ("target" = i64, Path, description = "The user to stop following", minimum = 1),
    ),
    responses(
        (status = 204, description = "Not following"),
        (status = 403, description = "Acting for another user", body = ErrorBody),
    )
)]
#[delete("/users/{id}/following/{target}")]
pub async fn unfollow(
    caller: Caller,
    engine: web::Data<Engine>,
    path: web::Path<(String, String)>,
) -> Result<HttpResponse, AppError> {
    let (follower, target) = edge(&caller, &path)?;
    engine.relations().unfollow(follower, target).await?;
    Ok(HttpResponse::NoContent().finish())
}

/// An author's own posts, newest first, with the same cursors as the feed
/// (`max` down, `min` up). Empty while the author and the caller block one
/// another.
#[utoipa::path(
    tag = "users",
    operation_id = "user_posts",
    params(("id" = i64, Path, description = "Author id", minimum = 1), PageQuery),
    responses(
        (status = 200, description = "A page of the author's posts", body = PageView),
        (status = 404, description = "No such user", body = ErrorBody),
    )
)]
#[get("/users/{id}/posts")]
pub async fn posts(
    caller: Caller,
    engine: web::Data<Engine>,
    path: web::Path<String>,
    query: web::Query<PageQuery>,
) -> Result<HttpResponse, AppError> {
    let author = id(&path, "user id")?;
    let req = query.parse()?;
    let page = engine
        .reads()
        .author_page_seen_by(caller.viewer(), author, req)
        .await?;
    Ok(HttpResponse::Ok().json(PageView::from(&page)))
}
