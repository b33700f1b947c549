//! Mastodon's search (v2), for accounts: a client finds whom to follow,
//! mute or list by a username or the start of one (`@name`, `name@host`
//! and an account's page address name this service's accounts). Every
//! account is local, so `resolve` has nothing to fetch: it is accepted and
//! ignored. There are no hashtags and no full-text search of statuses:
//! those lists are empty.

use actix_web::{get, web, HttpRequest, HttpResponse};
use serde::{Deserialize, Serialize};

use super::entities::{Account, Origin, Status};
use crate::engine::Engine;
use crate::error::AppError;
use crate::http::auth::Caller;
use crate::http::errors::ErrorBody;

/// Accounts an answer holds by default, and at most.
const DEFAULT_LIMIT: u32 = 20;
const MAX_LIMIT: u32 = 40;

/// Results skipped at most (`offset`).
pub const MAX_OFFSET: u32 = 10_000;

/// A search, as Mastodon names its parameters.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct SearchQuery {
    /// A username or its start (`@` and this host allowed: `@ann`,
    /// `ann@host`), or an account's page address. Case does not matter.
    q: Option<String>,
    /// `accounts`, `hashtags` or `statuses`: only that kind.
    #[serde(rename = "type")]
    kind: Option<String>,
    /// Accepted and ignored: every account is local.
    #[param(value_type = Option<bool>)]
    resolve: Option<String>,
    /// Only accounts the caller follows.
    #[param(value_type = Option<bool>)]
    following: Option<String>,
    /// Checked, then ignored (statuses of one account: none are searched).
    account_id: Option<String>,
    /// Accepted and ignored (hashtags: there are none).
    #[param(value_type = Option<bool>)]
    exclude_unreviewed: Option<String>,
    /// Results at most (default 20; at most 40, larger values are lowered).
    #[param(value_type = Option<i64>, minimum = 1)]
    limit: Option<String>,
    /// Results skipped (0 to 10,000).
    #[param(value_type = Option<i64>, minimum = 0, maximum = 10000)]
    offset: Option<String>,
}

/// Mastodon's search results.
#[derive(Serialize, utoipa::ToSchema)]
#[schema(as = MastodonSearch)]
pub struct Results {
    accounts: Vec<Account>,
    statuses: Vec<Status>,
    #[schema(value_type = Vec<Object>)]
    hashtags: Vec<serde_json::Value>,
}

/// Searches accounts by username (Mastodon v2): the exact match first,
/// then those whose username starts with the term, in their usernames'
/// order; active accounts only.
#[utoipa::path(
    tag = "mastodon",
    operation_id = "mastodon_search",
    params(SearchQuery),
    responses(
        (status = 200, description = "The accounts found; no statuses or hashtags", body = Results),
        (status = 400, description = "No q, an unknown type, or a malformed number, flag or account id", body = ErrorBody),
    )
)]
#[get("/search")]
pub async fn search(
    req: HttpRequest,
    caller: Caller,
    engine: web::Data<Engine>,
    query: web::Query<SearchQuery>,
) -> Result<HttpResponse, AppError> {
    let q = query
        .q
        .as_deref()
        .ok_or_else(|| AppError::BadRequest("q is missing".into()))?;
    let accounts_wanted = match query.kind.as_deref() {
        None | Some("") | Some("accounts") => true,
        Some("hashtags") | Some("statuses") => false,
        Some(other) => {
            return Err(AppError::BadRequest(format!(
                "type must be accounts, hashtags or statuses, got {other:?}"
            )))
        }
    };
    for (name, value) in [
        ("resolve", &query.resolve),
        ("exclude_unreviewed", &query.exclude_unreviewed),
    ] {
        flag(name, value)?;
    }
    let following = flag("following", &query.following)?;
    if let Some(id) = query.account_id.as_deref().filter(|v| !v.is_empty()) {
        super::account_id(id)?;
    }
    let limit = super::limit_param(query.limit.as_deref(), DEFAULT_LIMIT, MAX_LIMIT)?;
    let offset = offset(query.offset.as_deref())?;
    let origin = Origin::of(&req);
    let accounts = match (accounts_wanted, term(q, &origin)) {
        (true, Some(Term::Prefix(prefix))) => {
            let followed_by = following.then_some(caller.id);
            engine
                .profiles()
                .search(&prefix, followed_by, offset, limit)
                .await?
        }
        (true, Some(Term::Exact(name))) => {
            let followed_by = following.then_some(caller.id);
            let mut found = engine
                .profiles()
                .search(&name, followed_by, offset, 1)
                .await?;
            found.retain(|a| a.username == name);
            found
        }
        _ => Vec::new(),
    };
    Ok(HttpResponse::Ok().json(Results {
        accounts: accounts.iter().map(|a| Account::new(a, &origin)).collect(),
        statuses: Vec::new(),
        hashtags: Vec::new(),
    }))
}

/// What a search term names.
#[derive(Debug, PartialEq, Eq)]
enum Term {
    /// Usernames that start with it.
    Prefix(String),
    /// The username itself (an account's address).
    Exact(String),
}

/// The usernames `q` names on this service (`origin`): none for a hashtag,
/// another host's account or an empty term.
fn term(q: &str, origin: &Origin) -> Option<Term> {
    let q = q.trim().to_ascii_lowercase();
    let this_host = origin
        .0
        .split_once("://")
        .map_or("", |(_, host)| host)
        .to_ascii_lowercase();
    if let Some(rest) = q
        .strip_prefix("https://")
        .or_else(|| q.strip_prefix("http://"))
    {
        let (host, path) = rest.split_once('/')?;
        let name = path
            .strip_prefix('@')
            .or_else(|| path.strip_prefix("users/"))?;
        let name = name.trim_end_matches('/');
        return (host == this_host && !name.is_empty() && !name.contains('/'))
            .then(|| Term::Exact(name.to_string()));
    }
    let acct = q.strip_prefix('@').unwrap_or(&q);
    let name = match acct.split_once('@') {
        None => acct,
        Some((name, host)) if host == this_host => name,
        Some(_) => return None,
    };
    (!name.is_empty() && !name.starts_with('#')).then(|| Term::Prefix(name.to_string()))
}

/// A Mastodon boolean parameter: absent or empty is false.
fn flag(name: &str, value: &Option<String>) -> Result<bool, AppError> {
    match value.as_deref().map(str::to_ascii_lowercase).as_deref() {
        None | Some("") | Some("false") | Some("0") | Some("off") | Some("no") => Ok(false),
        Some("true") | Some("1") | Some("on") | Some("yes") => Ok(true),
        Some(other) => Err(AppError::BadRequest(format!(
            "{name} must be true or false, got {other:?}"
        ))),
    }
}

/// The `offset` asked: 0 to [`MAX_OFFSET`].
fn offset(raw: Option<&str>) -> Result<u32, AppError> {
    match raw {
        None | Some("") => Ok(0),
        Some(v) => v
            .parse::<u32>()
            .ok()
            .filter(|n| *n <= MAX_OFFSET)
            .ok_or_else(|| {
                AppError::BadRequest(format!("offset must be 0 to {MAX_OFFSET}, got {v:?}"))
            }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn origin() -> Origin {
        Origin("http://feed.example:8080".into())
    }

    #[test]
    fn a_term_names_usernames_of_this_host_only() {
        let prefix = |s: &str| Some(Term::Prefix(s.into()));
        let exact = |s: &str| Some(Term::Exact(s.into()));
        assert_eq!(term("Ann", &origin()), prefix("ann"));
        assert_eq!(term(" @ann ", &origin()), prefix("ann"));
        assert_eq!(term("ann@feed.example:8080", &origin()), prefix("ann"));
        assert_eq!(term("@ann@elsewhere.social", &origin()), None);
        assert_eq!(term("#rust", &origin()), None);
        assert_eq!(term("", &origin()), None);
        assert_eq!(term("@", &origin()), None);
        assert_eq!(
            term("http://feed.example:8080/@ann", &origin()),
            exact("ann")
        );
        assert_eq!(
            term("http://feed.example:8080/users/ann/", &origin()),
            exact("ann")
        );
        assert_eq!(term("https://elsewhere.social/@ann", &origin()), None);
        assert_eq!(term("http://feed.example:8080/about", &origin()), None);
    }

    #[test]
    fn flags_and_offsets_are_checked() {
        assert!(!flag("f", &None).unwrap());
        assert!(flag("f", &Some("TRUE".into())).unwrap());
        assert!(flag("f", &Some("maybe".into())).is_err());
        assert_eq!(offset(Some("10000")).unwrap(), 10_000);
        assert!(offset(Some("10001")).is_err());
        assert!(offset(Some("-1")).is_err());
    }
}
