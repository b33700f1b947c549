use actix_web::{get, web, HttpRequest, HttpResponse};

use super::entities::{post_status_id, Origin, Status};
use super::filters::filtered;
use super::{account_id, status_list, IdPaging};
use crate::engine::filters::matches;
use crate::engine::{Bounds, Engine, Feed};
use crate::error::AppError;
use crate::http::auth::Caller;
use crate::http::errors::ErrorBody;
use crate::store::pg::FilterWithKeywords;
use crate::types::{Entry, Post, UserId};

/// Statuses a timeline page holds by default, and at most.
const DEFAULT_LIMIT: u32 = 20;
const MAX_LIMIT: u32 = 40;

/// The caller's home timeline (Mastodon): the same feed as
/// `GET /api/v1/feed`, paged by status ids; each status carries what the
/// caller's `home` filters matched in it, and those a `hide` filter
/// matched are left out (the page read on to stay full). `max_id`: older than it;
/// `since_id`: the newest newer than it; `min_id`: the ones immediately
/// newer than it (to fill a gap or refresh with no gap). The `Link` header
/// names the next (`max_id`) and previous (`min_id`) pages.
#[utoipa::path(
    tag = "mastodon",
    operation_id = "mastodon_home_timeline",
    params(IdPaging),
    responses(
        (status = 200, description = "Statuses, newest first", body = Vec<Status>,
            headers(("Link" = String, description = "`rel=\"next\"` and `rel=\"prev\"` pages"))),
        (status = 404, description = "The caller is no account", body = ErrorBody),
    )
)]
#[get("/timelines/home")]
pub async fn home(
    req: HttpRequest,
    caller: Caller,
    engine: web::Data<Engine>,
    query: web::Query<IdPaging>,
) -> Result<HttpResponse, AppError> {
    engine.user(caller.id).await?;
    home_filtered(&req, &engine, caller.id, Feed::Home(caller.id), &query).await
}

/// One of the caller's lists as a timeline (Mastodon): its members' posts,
/// paged and filtered as the home timeline is (a list is read in the
/// `home` context, as Mastodon's are).
#[utoipa::path(
    tag = "mastodon",
    operation_id = "mastodon_list_timeline",
    params(("list_id" = String, Path, description = "List id"), IdPaging),
    responses(
        (status = 200, description = "Statuses, newest first", body = Vec<Status>,
            headers(("Link" = String, description = "`rel=\"next\"` and `rel=\"prev\"` pages"))),
        (status = 404, description = "The caller has no such list", body = ErrorBody),
    )
)]
#[get("/timelines/list/{list_id}")]
pub async fn list(
    req: HttpRequest,
    caller: Caller,
    engine: web::Data<Engine>,
    path: web::Path<String>,
    query: web::Query<IdPaging>,
) -> Result<HttpResponse, AppError> {
    let list = super::lists::list_id(&path)?;
    let feed = Feed::List {
        owner: caller.id,
        list,
    };
    home_filtered(&req, &engine, caller.id, feed, &query).await
}

/// A page of `feed` as the home timeline shows it: with what `reader`'s
/// `home` filters match, and full pages where a `hide` filter leaves
/// statuses out.
async fn home_filtered(
    req: &HttpRequest,
    engine: &Engine,
    reader: UserId,
    feed: Feed,
    query: &IdPaging,
) -> Result<HttpResponse, AppError> {
    let (bounds, limit) = (
        query.status_bounds()?,
        query.limit(DEFAULT_LIMIT, MAX_LIMIT)?,
    );
    let filters = engine.filters().applying(reader, "home").await?;
    if filters.is_empty() {
        let posts = engine.reads().page_between(feed, bounds, limit).await?;
        return status_list(req, engine, posts, &[]).await;
    }
    filtered_page(req, engine, feed, bounds, limit, &filters).await
}

/// Pages read on past the statuses `hide` filters leave out, at most
/// (each of [`MAX_LIMIT`] statuses).
const EXTRA_READS: usize = 4;

/// A page of `feed` in which `filters` mark what they match and leave out
/// what a `hide` filter matches: read on (up to [`EXTRA_READS`] more
/// pages of [`MAX_LIMIT`]) until `limit` statuses are left, the `Link` header naming the
/// last status looked at, shown or not, so that paging on skips none and
/// repeats none.
async fn filtered_page(
    req: &HttpRequest,
    engine: &Engine,
    feed: Feed,
    mut bounds: Bounds,
    limit: u32,
    filters: &[FilterWithKeywords],
) -> Result<HttpResponse, AppError> {
    let hidden = |p: &Post| {
        matches(filters, &p.body)
            .iter()
            .any(|(f, _)| f.0.action == "hide")
    };
    // In the order the page is read: older and older, or (`min_id`)
    // newer and newer.
    let mut looked: Vec<Post> = Vec::new();
    let mut shown = 0;
    let mut asked = limit;
    for _ in 0..=EXTRA_READS {
        let mut posts = engine.reads().page_between(feed, bounds, asked).await?;
        let full = posts.len() == asked as usize;
        if bounds.closest {
            posts.reverse();
        }
        for post in posts {
            shown += usize::from(!hidden(&post));
            looked.push(post);
            if shown == limit as usize {
                break;
            }
        }
        let Some(last) = looked.last() else { break };
        if shown == limit as usize || !full {
            break;
        }
        let last = Entry::new(last.created_at_ms, last.id);
        asked = MAX_LIMIT;
        if bounds.closest {
            bounds.newer_than = Some(last);
        } else {
            bounds.older_than = Some(last);
        }
    }
    if bounds.closest {
        looked.reverse();
    }
    let origin = Origin::of(req);
    let ends = looked.first().zip(looked.last());
    let ends = ends.map(|(first, last)| (post_status_id(first), post_status_id(last)));
    let statuses = super::statuses(engine, &origin, &looked).await?;
    let statuses = filtered(filters, statuses, true);
    Ok(super::paged(req, &origin, ends, statuses))
}

/// An account's statuses (Mastodon), newest first, paged as the home
/// timeline; none while it and the caller block one another. Each carries
/// what the caller's `account` filters matched in it (none is left out:
/// the client decides, as Mastodon's do).
#[utoipa::path(
    tag = "mastodon",
    operation_id = "mastodon_account_statuses",
    params(("id" = String, Path, description = "Account id"), IdPaging),
    responses(
        (status = 200, description = "Statuses, newest first", body = Vec<Status>,
            headers(("Link" = String, description = "`rel=\"next\"` and `rel=\"prev\"` pages"))),
        (status = 404, description = "No such account", body = ErrorBody),
    )
)]
#[get("/accounts/{id}/statuses")]
pub async fn account_statuses(
    req: HttpRequest,
    caller: Caller,
    engine: web::Data<Engine>,
    path: web::Path<String>,
    query: web::Query<IdPaging>,
) -> Result<HttpResponse, AppError> {
    let author = account_id(&path)?;
    let (bounds, limit) = (
        query.status_bounds()?,
        query.limit(DEFAULT_LIMIT, MAX_LIMIT)?,
    );
    engine.profiles().profile(author).await?;
    let feed = Feed::Author {
        viewer: caller.viewer(),
        author,
    };
    let posts = engine.reads().page_between(feed, bounds, limit).await?;
    let filters = engine.filters().applying(caller.id, "account").await?;
    status_list(&req, &engine, posts, &filters).await
}
