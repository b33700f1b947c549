//! Mastodon's lists: a user's named groups of accounts it follows, their
//! members, and (in `timelines`) each list's timeline. Bodies come as JSON
//! or as forms; the accounts of a change as `account_ids[]` in the body
//! (or, for a removal, in the query string, as some clients send it).

use actix_web::{delete, get, post, put, web, HttpRequest, HttpResponse};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::entities::{Account, Origin};
use super::filters::{body_of, flag, number};
use super::{account_id, repeated_param, IdPaging};
use crate::engine::lists::ListInput;
use crate::engine::Engine;
use crate::error::AppError;
use crate::http::auth::Caller;
use crate::http::errors::ErrorBody;
use crate::store::pg::ListRow;
use crate::types::{ListId, UserId};

/// A list, as Mastodon's List.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[schema(as = MastodonList)]
pub struct List {
    id: String,
    title: String,
    /// `followed`, `list` or `none` (kept: posts here are not replies).
    replies_policy: String,
    /// Whether its members leave the home while they are in it.
    exclusive: bool,
}

impl From<&ListRow> for List {
    fn from(l: &ListRow) -> Self {
        List {
            id: l.id.to_string(),
            title: l.title.clone(),
            replies_policy: l.replies_policy.clone(),
            exclusive: l.exclusive,
        }
    }
}

/// A list's fields, as a client sends them.
#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
pub struct ListBody {
    title: Option<String>,
    /// `followed`, `list` (the default) or `none`.
    replies_policy: Option<String>,
    /// Whether its members leave the home (default false).
    #[schema(value_type = Option<bool>)]
    exclusive: Option<Value>,
}

impl ListBody {
    fn input(&self) -> Result<ListInput, AppError> {
        Ok(ListInput {
            title: self.title.clone(),
            replies_policy: self.replies_policy.clone().filter(|p| !p.is_empty()),
            exclusive: self
                .exclusive
                .as_ref()
                .filter(|v| !v.is_null())
                .map(|v| flag("exclusive", v))
                .transpose()?,
        })
    }
}

/// The accounts of a change of members.
#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
pub struct MembersBody {
    /// Account ids.
    #[schema(value_type = Option<Vec<String>>)]
    account_ids: Option<Vec<Value>>,
}

/// A list id in a path.
pub(super) fn list_id(raw: &str) -> Result<ListId, AppError> {
    crate::domain::parse_id(raw, "list id")
        .map(ListId)
        .map_err(AppError::BadRequest)
}

/// The accounts a change names: in its body, else in its query string.
fn accounts_of(req: &HttpRequest, body: &[u8]) -> Result<Vec<UserId>, AppError> {
    let given: MembersBody = match body.is_empty() {
        true => MembersBody::default(),
        false => body_of(req, body)?,
    };
    let ids = match given.account_ids {
        Some(ids) => ids
            .iter()
            .map(|v| number("account_ids", v).map(UserId))
            .collect::<Result<Vec<_>, _>>()?,
        None => repeated_param(req, "account_ids")?
            .iter()
            .map(|v| account_id(v))
            .collect::<Result<Vec<_>, _>>()?,
    };
    Ok(ids)
}

/// The caller's lists (Mastodon), oldest first.
#[utoipa::path(
    tag = "mastodon",
    operation_id = "mastodon_lists",
    responses((status = 200, description = "The lists", body = Vec<List>))
)]
#[get("/lists")]
pub async fn all(caller: Caller, engine: web::Data<Engine>) -> Result<HttpResponse, AppError> {
    let lists = engine.lists().all(caller.id).await?;
    Ok(HttpResponse::Ok().json(lists.iter().map(List::from).collect::<Vec<_>>()))
}

/// A new list (Mastodon): `title` required, `replies_policy`,
/// `exclusive`. 422 past 50 lists per user.
#[utoipa::path(
    tag = "mastodon",
    operation_id = "mastodon_list_create",
    request_body(content = ListBody, description = "JSON or a form"),
    responses(
        (status = 200, description = "The list", body = List),
        (status = 400, description = "A field missing or out of bounds", body = ErrorBody),
        (status = 422, description = "Too many lists", body = ErrorBody),
    )
)]
#[post("/lists")]
pub async fn create(
    req: HttpRequest,
    caller: Caller,
    engine: web::Data<Engine>,
    body: web::Bytes,
) -> Result<HttpResponse, AppError> {
    let body: ListBody = body_of(&req, &body)?;
    let made = engine.lists().create(caller.id, &body.input()?).await?;
    Ok(HttpResponse::Ok().json(List::from(&made)))
}

/// One of the caller's lists (Mastodon).
#[utoipa::path(
    tag = "mastodon",
    operation_id = "mastodon_list",
    params(("id" = String, Path, description = "List id")),
    responses(
        (status = 200, description = "The list", body = List),
        (status = 404, description = "The caller has no such list", body = ErrorBody),
    )
)]
#[get("/lists/{id}")]
pub async fn get(
    caller: Caller,
    engine: web::Data<Engine>,
    path: web::Path<String>,
) -> Result<HttpResponse, AppError> {
    let list = engine.lists().one(caller.id, list_id(&path)?).await?;
    Ok(HttpResponse::Ok().json(List::from(&list)))
}

/// Changes one of the caller's lists (Mastodon): its title, replies
/// policy, or whether it is exclusive (its members leave the home, or come
/// back, at once).
#[utoipa::path(
    tag = "mastodon",
    operation_id = "mastodon_list_update",
    params(("id" = String, Path, description = "List id")),
    request_body(content = ListBody, description = "JSON or a form"),
    responses(
        (status = 200, description = "The list", body = List),
        (status = 400, description = "A field out of bounds", body = ErrorBody),
        (status = 404, description = "The caller has no such list", body = ErrorBody),
    )
)]
#[put("/lists/{id}")]
pub async fn update(
    req: HttpRequest,
    caller: Caller,
    engine: web::Data<Engine>,
    path: web::Path<String>,
    body: web::Bytes,
) -> Result<HttpResponse, AppError> {
    let list = list_id(&path)?;
    let body: ListBody = body_of(&req, &body)?;
    let changed = engine
        .lists()
        .update(caller.id, list, &body.input()?)
        .await?;
    Ok(HttpResponse::Ok().json(List::from(&changed)))
}

/// Removes one of the caller's lists (Mastodon).
#[utoipa::path(
    tag = "mastodon",
    operation_id = "mastodon_list_delete",
    params(("id" = String, Path, description = "List id")),
    responses(
        (status = 200, description = "Removed (an empty object)", body = Object),
        (status = 404, description = "The caller has no such list", body = ErrorBody),
    )
)]
#[delete("/lists/{id}")]
pub async fn remove(
    caller: Caller,
    engine: web::Data<Engine>,
    path: web::Path<String>,
) -> Result<HttpResponse, AppError> {
    engine.lists().delete(caller.id, list_id(&path)?).await?;
    Ok(HttpResponse::Ok().json(json!({})))
}

/// A list's members (Mastodon), highest account id first, paged by
/// account id with a `Link` header; `limit` 40 by default, at most 80,
/// and 0 for all of them.
#[utoipa::path(
    tag = "mastodon",
    operation_id = "mastodon_list_accounts",
    params(("id" = String, Path, description = "List id"), IdPaging),
    responses(
        (status = 200, description = "Accounts", body = Vec<Account>,
            headers(("Link" = String, description = "`rel=\"next\"` and `rel=\"prev\"` pages"))),
        (status = 404, description = "The caller has no such list", body = ErrorBody),
    )
)]
#[get("/lists/{id}/accounts")]
pub async fn members(
    req: HttpRequest,
    caller: Caller,
    engine: web::Data<Engine>,
    path: web::Path<String>,
    query: web::Query<IdPaging>,
) -> Result<HttpResponse, AppError> {
    let list = list_id(&path)?;
    let range = query.id_range("an account id")?;
    let limit = match query.limit.as_deref() {
        Some("0") => 0,
        _ => i64::from(query.limit(40, 80)?),
    };
    let lists = engine.lists();
    let mut ids = lists
        .members(
            caller.id,
            list,
            (range.above, range.below),
            range.closest,
            limit,
        )
        .await?;
    if range.closest {
        ids.reverse();
    }
    let mut rows = engine.profiles().profiles(&ids).await?;
    // (In the page's order: read in none.)
    rows.sort_by_key(|r| ids.iter().position(|id| *id == r.id));
    let origin = Origin::of(&req);
    let accounts: Vec<Account> = rows.iter().map(|r| Account::new(r, &origin)).collect();
    let ends = ids.first().zip(ids.last());
    let ends = ends.map(|(first, last)| (first.to_string(), last.to_string()));
    Ok(super::paged(&req, &origin, ends, accounts))
}

/// Adds accounts the caller follows to one of its lists (Mastodon,
/// `account_ids[]`): 422 for an account it does not follow, or past 250
/// members, and then nothing changes. Their past posts are in the list at
/// once; an exclusive list's members leave the home at once.
#[utoipa::path(
    tag = "mastodon",
    operation_id = "mastodon_list_add",
    params(("id" = String, Path, description = "List id")),
    request_body(content = MembersBody, description = "JSON or a form"),
    responses(
        (status = 200, description = "Added (an empty object)", body = Object),
        (status = 400, description = "No account, or an id that is not one", body = ErrorBody),
        (status = 404, description = "The caller has no such list", body = ErrorBody),
        (status = 422, description = "An account not followed, or too many", body = ErrorBody),
    )
)]
#[post("/lists/{id}/accounts")]
pub async fn add(
    req: HttpRequest,
    caller: Caller,
    engine: web::Data<Engine>,
    path: web::Path<String>,
    body: web::Bytes,
) -> Result<HttpResponse, AppError> {
    let list = list_id(&path)?;
    let accounts = accounts_of(&req, &body)?;
    engine.lists().add(caller.id, list, &accounts).await?;
    Ok(HttpResponse::Ok().json(json!({})))
}

/// Takes accounts out of one of the caller's lists (Mastodon,
/// `account_ids[]`): their posts leave the list at once; an exclusive
/// list's come back home at once.
#[utoipa::path(
    tag = "mastodon",
    operation_id = "mastodon_list_remove",
    params(("id" = String, Path, description = "List id")),
    request_body(content = MembersBody, description = "JSON or a form (or `account_ids[]` in the query)"),
    responses(
        (status = 200, description = "Removed (an empty object)", body = Object),
        (status = 400, description = "No account, or an id that is not one", body = ErrorBody),
        (status = 404, description = "The caller has no such list", body = ErrorBody),
    )
)]
#[delete("/lists/{id}/accounts")]
pub async fn remove_members(
    req: HttpRequest,
    caller: Caller,
    engine: web::Data<Engine>,
    path: web::Path<String>,
    body: web::Bytes,
) -> Result<HttpResponse, AppError> {
    let list = list_id(&path)?;
    let accounts = accounts_of(&req, &body)?;
    engine.lists().remove(caller.id, list, &accounts).await?;
    Ok(HttpResponse::Ok().json(json!({})))
}

/// The caller's lists that hold an account (Mastodon).
#[utoipa::path(
    tag = "mastodon",
    operation_id = "mastodon_account_lists",
    params(("id" = String, Path, description = "Account id")),
    responses(
        (status = 200, description = "The lists", body = Vec<List>),
        (status = 400, description = "An id that is not one", body = ErrorBody),
    )
)]
#[get("/accounts/{id}/lists")]
pub async fn of_account(
    caller: Caller,
    engine: web::Data<Engine>,
    path: web::Path<String>,
) -> Result<HttpResponse, AppError> {
    let member = account_id(&path)?;
    let lists = engine.lists().holding(caller.id, member).await?;
    Ok(HttpResponse::Ok().json(lists.iter().map(List::from).collect::<Vec<_>>()))
}
