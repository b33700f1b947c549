use actix_web::{get, post, web, HttpRequest, HttpResponse};
use serde::{Deserialize, Serialize};

use super::entities::{Account, Origin, Relationship};
use super::{account_id, IdPaging};
use crate::engine::{Engine, MAX_PROFILES};
use crate::error::AppError;
use crate::http::auth::Caller;
use crate::http::errors::ErrorBody;
use crate::store::pg::FollowList;
use crate::types::UserId;

/// Accounts a list page holds by default, and at most.
const DEFAULT_LIMIT: u32 = 40;
const MAX_LIMIT: u32 = 80;

/// The caller's account, with its `source` (Mastodon's CredentialAccount).
#[derive(Serialize, utoipa::ToSchema)]
#[schema(as = MastodonCredentialAccount)]
pub struct CredentialAccount {
    #[serde(flatten)]
    account: Account,
    #[schema(value_type = Object)]
    source: serde_json::Value,
}

/// The caller's own account (Mastodon).
#[utoipa::path(
    tag = "mastodon",
    operation_id = "mastodon_verify_credentials",
    responses(
        (status = 200, description = "The caller's account", body = CredentialAccount),
        (status = 404, description = "The caller is no account (an admin token, say)", body = ErrorBody),
    )
)]
#[get("/accounts/verify_credentials")]
pub async fn verify_credentials(
    req: HttpRequest,
    caller: Caller,
    engine: web::Data<Engine>,
) -> Result<HttpResponse, AppError> {
    let row = engine.profiles().profile(caller.id).await?;
    Ok(HttpResponse::Ok().json(CredentialAccount {
        account: Account::new(&row, &Origin::of(&req)),
        source: serde_json::json!({
            "privacy": "public", "sensitive": false, "language": null,
            "note": "", "fields": [], "follow_requests_count": 0,
        }),
    }))
}

/// The account an `acct` names.
#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct Lookup {
    /// `username`, or `username@this-host`.
    acct: String,
}

/// An account by its username (Mastodon).
#[utoipa::path(
    tag = "mastodon",
    operation_id = "mastodon_lookup_account",
    params(Lookup),
    responses(
        (status = 200, description = "The account", body = Account),
        (status = 404, description = "No such account here", body = ErrorBody),
    )
)]
#[get("/accounts/lookup")]
pub async fn lookup(
    req: HttpRequest,
    _caller: Caller,
    engine: web::Data<Engine>,
    query: web::Query<Lookup>,
) -> Result<HttpResponse, AppError> {
    let origin = Origin::of(&req);
    let acct = query.acct.trim_start_matches('@');
    let username = match acct.split_once('@') {
        None => acct,
        Some((name, host)) if origin.0.ends_with(&format!("://{host}")) => name,
        Some(_) => {
            return Err(AppError::NotFound(format!(
                "{acct:?} is not an account of this service"
            )))
        }
    };
    let row = engine.profiles().profile_named(username).await?;
    Ok(HttpResponse::Ok().json(Account::new(&row, &origin)))
}

/// How the caller stands to accounts (Mastodon): `id[]` (or `id`)
/// repeated, up to 100; unknown ones answer as strangers.
#[utoipa::path(
    tag = "mastodon",
    operation_id = "mastodon_relationships",
    params(("id[]" = Option<Vec<String>>, Query, description = "Account ids")),
    responses(
        (status = 200, description = "One per id, in order", body = Vec<Relationship>),
        (status = 422, description = "More than 100 ids", body = ErrorBody),
    )
)]
#[get("/accounts/relationships")]
pub async fn relationships(
    req: HttpRequest,
    caller: Caller,
    engine: web::Data<Engine>,
) -> Result<HttpResponse, AppError> {
    let ids = super::repeated_param(&req, "id")?
        .iter()
        .map(|v| account_id(v))
        .collect::<Result<Vec<UserId>, AppError>>()?;
    if ids.len() > MAX_PROFILES {
        return Err(AppError::Unprocessable(format!(
            "at most {MAX_PROFILES} ids at once"
        )));
    }
    let rows = engine.profiles().relationships(caller.id, &ids).await?;
    let answer: Vec<Relationship> = ids
        .iter()
        .zip(&rows)
        .map(|(id, rel)| Relationship::new(*id, rel))
        .collect();
    Ok(HttpResponse::Ok().json(answer))
}

/// An account (Mastodon).
#[utoipa::path(
    tag = "mastodon",
    operation_id = "mastodon_get_account",
    params(("id" = String, Path, description = "Account id")),
    responses(
        (status = 200, description = "The account", body = Account),
        (status = 404, description = "No such account", body = ErrorBody),
    )
)]
#[get("/accounts/{id}")]
pub async fn get(
    req: HttpRequest,
    _caller: Caller,
    engine: web::Data<Engine>,
    path: web::Path<String>,
) -> Result<HttpResponse, AppError> {
    let row = engine.profiles().profile(account_id(&path)?).await?;
    Ok(HttpResponse::Ok().json(Account::new(&row, &Origin::of(&req))))
}

/// What a relationship route does.
#[derive(Debug, Clone, Copy)]
enum Change {
    Follow,
    Unfollow,
    Mute,
    Unmute,
    Block,
    Unblock,
}

/// Applies `change` from the caller to the account of `path`, and answers
/// the relationship after it (as Mastodon does).
async fn relate(
    caller: Caller,
    engine: &Engine,
    path: &str,
    change: Change,
) -> Result<HttpResponse, AppError> {
    let target = account_id(path)?;
    let me = caller.id;
    match change {
        Change::Follow => engine.relations().follow(me, target).await?,
        Change::Unfollow => engine.relations().unfollow(me, target).await?,
        Change::Mute => engine.relations().mute(me, target, true).await?,
        Change::Unmute => engine.relations().mute(me, target, false).await?,
        Change::Block => engine.relations().block(me, target).await?,
        Change::Unblock => engine.relations().unblock(me, target).await?,
    }
    let rel = engine.profiles().relationships(me, &[target]).await?;
    Ok(HttpResponse::Ok().json(Relationship::new(target, &rel[0])))
}

macro_rules! relationship_route {
    ($name:ident, $path:literal, $op:literal, $change:expr, $doc:literal) => {
        #[doc = $doc]
        #[utoipa::path(
            tag = "mastodon",
            operation_id = $op,
            params(("id" = String, Path, description = "Account id")),
            responses(
                (status = 200, description = "The relationship after it", body = Relationship),
                (status = 403, description = "The caller is suspended", body = ErrorBody),
                (status = 404, description = "No such account", body = ErrorBody),
                (status = 422, description = "Oneself, or across a block", body = ErrorBody),
            )
        )]
        #[post($path)]
        pub async fn $name(
            caller: Caller,
            engine: web::Data<Engine>,
            path: web::Path<String>,
        ) -> Result<HttpResponse, AppError> {
            relate(caller, &engine, &path, $change).await
        }
    };
}

relationship_route!(
    follow,
    "/accounts/{id}/follow",
    "mastodon_follow",
    Change::Follow,
    "Follows an account (Mastodon; idempotent): its recent posts are in the home when this returns."
);
relationship_route!(
    unfollow,
    "/accounts/{id}/unfollow",
    "mastodon_unfollow",
    Change::Unfollow,
    "Stops following an account (Mastodon; idempotent): its posts leave the home when this returns."
);
relationship_route!(
    mute,
    "/accounts/{id}/mute",
    "mastodon_mute",
    Change::Mute,
    "Mutes an account (Mastodon): its posts leave the home when this returns."
);
relationship_route!(
    unmute,
    "/accounts/{id}/unmute",
    "mastodon_unmute",
    Change::Unmute,
    "Unmutes an account (Mastodon): its posts are back."
);
relationship_route!(
    block,
    "/accounts/{id}/block",
    "mastodon_block",
    Change::Block,
    "Blocks an account (Mastodon): both follows go; neither sees the other's posts."
);
relationship_route!(
    unblock,
    "/accounts/{id}/unblock",
    "mastodon_unblock",
    Change::Unblock,
    "Lifts a block (Mastodon); follows are not restored."
);

/// An account's followers or followings, paged by account id, highest
/// first, with a `Link` header.
async fn follow_list(
    req: &HttpRequest,
    engine: &Engine,
    path: &str,
    query: &IdPaging,
    list: FollowList,
) -> Result<HttpResponse, AppError> {
    let owner = account_id(path)?;
    let limit = query.limit(DEFAULT_LIMIT, MAX_LIMIT)?;
    let range = query.id_range("an account id")?;
    let rows = engine
        .profiles()
        .follow_list(owner, list, range, limit)
        .await?;
    let origin = Origin::of(req);
    let accounts: Vec<Account> = rows.iter().map(|r| Account::new(r, &origin)).collect();
    let ends = rows.first().zip(rows.last());
    let ends = ends.map(|(first, last)| (first.id.to_string(), last.id.to_string()));
    Ok(super::paged(req, &origin, ends, accounts))
}

/// An account's followers (Mastodon), highest account id first.
#[utoipa::path(
    tag = "mastodon",
    operation_id = "mastodon_followers",
    params(("id" = String, Path, description = "Account id"), IdPaging),
    responses(
        (status = 200, description = "Accounts", body = Vec<Account>,
            headers(("Link" = String, description = "`rel=\"next\"` and `rel=\"prev\"` pages"))),
        (status = 404, description = "No such account", body = ErrorBody),
    )
)]
#[get("/accounts/{id}/followers")]
pub async fn followers(
    req: HttpRequest,
    _caller: Caller,
    engine: web::Data<Engine>,
    path: web::Path<String>,
    query: web::Query<IdPaging>,
) -> Result<HttpResponse, AppError> {
    follow_list(&req, &engine, &path, &query, FollowList::Followers).await
}

/// The accounts an account follows (Mastodon), highest account id first.
#[utoipa::path(
    tag = "mastodon",
    operation_id = "mastodon_following",
    params(("id" = String, Path, description = "Account id"), IdPaging),
    responses(
        (status = 200, description = "Accounts", body = Vec<Account>,
            headers(("Link" = String, description = "`rel=\"next\"` and `rel=\"prev\"` pages"))),
        (status = 404, description = "No such account", body = ErrorBody),
    )
)]
#[get("/accounts/{id}/following")]
pub async fn following(
    req: HttpRequest,
    _caller: Caller,
    engine: web::Data<Engine>,
    path: web::Path<String>,
    query: web::Query<IdPaging>,
) -> Result<HttpResponse, AppError> {
    follow_list(&req, &engine, &path, &query, FollowList::Following).await
}
