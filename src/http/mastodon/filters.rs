//! Mastodon's filters v2: a user's keyword filters with their contexts,
//! action (`warn`, `hide`, `blur`) and expiry; their keywords one by one.
//! Bodies come as JSON or as forms (`keywords_attributes[0][keyword]`).
//! Statuses read in a filter's context carry what it matched
//! (`filtered`).

use actix_web::{delete, get, post, put, web, HttpRequest, HttpResponse};
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use super::entities::{iso8601, Status};
use crate::engine::filters::{matches, FilterInput};
use crate::engine::Engine;
use crate::error::AppError;
use crate::http::auth::Caller;
use crate::http::errors::ErrorBody;
use crate::store::pg::{FilterWithKeywords, KeywordOp, KeywordRow};

/// A filter's keyword, as Mastodon's FilterKeyword.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[schema(as = MastodonFilterKeyword)]
pub struct FilterKeyword {
    id: String,
    keyword: String,
    whole_word: bool,
}

impl From<&KeywordRow> for FilterKeyword {
    fn from(k: &KeywordRow) -> Self {
        FilterKeyword {
            id: k.id.to_string(),
            keyword: k.keyword.clone(),
            whole_word: k.whole_word,
        }
    }
}

/// A filter, as Mastodon's Filter (v2).
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[schema(as = MastodonFilter)]
pub struct Filter {
    id: String,
    title: String,
    context: Vec<String>,
    expires_at: Option<String>,
    /// `warn`, `hide` or `blur`.
    filter_action: String,
    keywords: Vec<FilterKeyword>,
    /// Always empty: statuses are not filtered one by one here.
    #[schema(value_type = Vec<Object>)]
    statuses: Vec<Value>,
}

impl From<&FilterWithKeywords> for Filter {
    fn from((f, keywords): &FilterWithKeywords) -> Self {
        Filter {
            id: f.id.to_string(),
            title: f.title.clone(),
            context: f.contexts.clone(),
            expires_at: f.expires_at_ms.map(iso8601),
            filter_action: f.action.clone(),
            keywords: keywords.iter().map(FilterKeyword::from).collect(),
            statuses: Vec::new(),
        }
    }
}

/// A filter's fields and keyword changes, as a client sends them.
#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
pub struct FilterBody {
    title: Option<String>,
    /// Where it applies: `home`, `notifications`, `public`, `thread`,
    /// `account`.
    context: Option<Vec<String>>,
    /// `warn` (the default), `hide` or `blur`.
    filter_action: Option<String>,
    /// Seconds until it expires; empty or null: never.
    #[schema(value_type = Option<i64>)]
    expires_in: Option<Value>,
    /// Keywords to add (`keyword`, `whole_word`), change (with `id`) or
    /// remove (with `id` and `_destroy`).
    #[schema(value_type = Option<Vec<Object>>)]
    keywords_attributes: Option<Vec<Value>>,
}

/// A keyword's fields, as a client sends them.
#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
pub struct KeywordBody {
    keyword: Option<String>,
    #[schema(value_type = Option<bool>)]
    whole_word: Option<Value>,
}

/// A flag as clients send it: a boolean, or `true`/`false`/`1`/`0` as text.
pub(super) fn flag(name: &str, v: &Value) -> Result<bool, AppError> {
    match v {
        Value::Bool(b) => Ok(*b),
        Value::String(s) if matches!(s.as_str(), "true" | "1") => Ok(true),
        Value::String(s) if matches!(s.as_str(), "false" | "0") => Ok(false),
        Value::Number(n) if n.as_i64() == Some(1) => Ok(true),
        Value::Number(n) if n.as_i64() == Some(0) => Ok(false),
        other => Err(AppError::BadRequest(format!(
            "{name} must be true or false, got {other}"
        ))),
    }
}

/// An id as clients send it: a number, or its digits.
pub(super) fn number(name: &str, v: &Value) -> Result<i64, AppError> {
    let parsed = match v {
        Value::Number(n) => n.as_i64(),
        Value::String(s) => crate::domain::parse_id(s, name).ok(),
        _ => None,
    };
    parsed.ok_or_else(|| AppError::BadRequest(format!("{name} must be an id, got {v}")))
}

impl FilterBody {
    /// Its fields, as the engine takes them.
    fn input(&self) -> Result<FilterInput, AppError> {
        let expires_in = match &self.expires_in {
            None => None,
            Some(Value::Null) => Some(None),
            Some(Value::String(s)) if s.is_empty() => Some(None),
            Some(v) => Some(Some(number("expires_in", v)?)),
        };
        Ok(FilterInput {
            title: self.title.clone(),
            contexts: self.context.clone(),
            action: self.filter_action.clone(),
            expires_in,
        })
    }

    /// Its keyword changes, in order.
    fn keyword_ops(&self) -> Result<Vec<KeywordOp>, AppError> {
        let mut ops = Vec::new();
        for attr in self.keywords_attributes.iter().flatten() {
            let field = |name: &str| attr.get(name).filter(|v| !v.is_null());
            let keyword = field("keyword").map(|k| match k {
                Value::String(s) => Ok(s.clone()),
                other => Err(AppError::BadRequest(format!(
                    "keyword must be text, got {other}"
                ))),
            });
            let keyword = keyword.transpose()?;
            let whole_word = field("whole_word")
                .map(|v| flag("whole_word", v))
                .transpose()?;
            let destroy = field("_destroy").map(|v| flag("_destroy", v)).transpose()?;
            ops.push(match (field("id"), destroy) {
                (Some(id), Some(true)) => KeywordOp::Remove(number("id", id)?),
                (Some(id), _) => KeywordOp::Change {
                    id: number("id", id)?,
                    keyword,
                    whole_word,
                },
                (None, _) => KeywordOp::Add {
                    keyword: keyword.ok_or_else(|| {
                        AppError::BadRequest("a new keyword needs its keyword".into())
                    })?,
                    whole_word: whole_word.unwrap_or(true),
                },
            });
        }
        Ok(ops)
    }
}

/// A request's body as JSON, or as a form read into the same shape:
/// `name[]` a list, `name[i][field]` (or `name[][field]`) a list of
/// objects.
pub(super) fn body_of<T: serde::de::DeserializeOwned>(
    req: &HttpRequest,
    body: &[u8],
) -> Result<T, AppError> {
    let value = if super::is_json(req) {
        serde_json::from_slice(body)
            .map_err(|e| AppError::BadRequest(format!("invalid JSON body: {e}")))?
    } else {
        let pairs: Vec<(String, String)> = serde_urlencoded::from_bytes(body)
            .map_err(|e| AppError::BadRequest(format!("invalid form body: {e}")))?;
        form_value(pairs)
    };
    serde_json::from_value(value).map_err(|e| AppError::BadRequest(format!("invalid body: {e}")))
}

/// Form pairs as a JSON object (see [`body_of`]).
fn form_value(pairs: Vec<(String, String)>) -> Value {
    let mut out = Map::new();
    for (key, value) in pairs {
        let Some((name, rest)) = key.split_once('[') else {
            out.insert(key, Value::String(value));
            continue;
        };
        let items = out
            .entry(name.to_string())
            .or_insert_with(|| Value::Array(Vec::new()));
        let Value::Array(items) = items else { continue };
        let Some((index, field)) = rest.split_once(']') else {
            continue;
        };
        let field = field.trim_start_matches('[').trim_end_matches(']');
        if field.is_empty() {
            items.push(Value::String(value));
            continue;
        }
        let at = match index.parse::<usize>() {
            Ok(i) if i < 1000 => i,
            // `name[][field]`: a field seen already begins the next object.
            _ => match items.last() {
                Some(Value::Object(o)) if !o.contains_key(field) => items.len() - 1,
                _ => items.len(),
            },
        };
        while items.len() <= at {
            items.push(Value::Object(Map::new()));
        }
        if let Value::Object(o) = &mut items[at] {
            o.insert(field.to_string(), Value::String(value));
        }
    }
    Value::Object(out)
}

fn filter_id(raw: &str) -> Result<i64, AppError> {
    crate::domain::parse_id(raw, "filter id").map_err(AppError::BadRequest)
}

/// `filtered` of `statuses`: what each of `filters` matched in its text.
/// With `hide`, the statuses a `hide` filter matched are left out.
pub fn filtered(filters: &[FilterWithKeywords], statuses: Vec<Status>, hide: bool) -> Vec<Status> {
    if filters.is_empty() {
        return statuses;
    }
    statuses
        .into_iter()
        .filter_map(|mut status| {
            let found = matches(filters, &status.text);
            if hide && found.iter().any(|(f, _)| f.0.action == "hide") {
                return None;
            }
            status.filtered = found
                .into_iter()
                .map(|(f, words)| {
                    json!({
                        "filter": Filter::from(f),
                        "keyword_matches": words,
                        "status_matches": null,
                    })
                })
                .collect();
            Some(status)
        })
        .collect()
}

/// The caller's filters (Mastodon v2), oldest first.
#[utoipa::path(
    tag = "mastodon",
    operation_id = "mastodon_filters",
    responses((status = 200, description = "The filters", body = Vec<Filter>))
)]
#[get("/filters")]
pub async fn list(caller: Caller, engine: web::Data<Engine>) -> Result<HttpResponse, AppError> {
    let all = engine.filters().all(caller.id).await?;
    let out: Vec<Filter> = all.iter().map(Filter::from).collect();
    Ok(HttpResponse::Ok().json(out))
}

/// A new filter (Mastodon v2): `title` and `context[]` required,
/// `filter_action` (`warn`), `expires_in` (seconds), `keywords_attributes`.
/// 422 past 100 filters per user or 100 keywords per filter.
#[utoipa::path(
    tag = "mastodon",
    operation_id = "mastodon_filter_create",
    request_body(content = FilterBody, description = "JSON or a form"),
    responses(
        (status = 200, description = "The filter", body = Filter),
        (status = 400, description = "A field missing or out of bounds", body = ErrorBody),
        (status = 422, description = "Too many filters or keywords", body = ErrorBody),
    )
)]
#[post("/filters")]
pub async fn create(
    req: HttpRequest,
    caller: Caller,
    engine: web::Data<Engine>,
    body: web::Bytes,
) -> Result<HttpResponse, AppError> {
    let body: FilterBody = body_of(&req, &body)?;
    let made = engine
        .filters()
        .create(caller.id, &body.input()?, &body.keyword_ops()?)
        .await?;
    Ok(HttpResponse::Ok().json(Filter::from(&made)))
}

/// One of the caller's filters (Mastodon v2).
#[utoipa::path(
    tag = "mastodon",
    operation_id = "mastodon_filter",
    params(("id" = String, Path, description = "Filter id")),
    responses(
        (status = 200, description = "The filter", body = Filter),
        (status = 400, description = "A malformed id", body = ErrorBody),
        (status = 404, description = "The caller has no filter of that id", body = ErrorBody),
    )
)]
#[get("/filters/{id}")]
pub async fn get(
    caller: Caller,
    engine: web::Data<Engine>,
    path: web::Path<String>,
) -> Result<HttpResponse, AppError> {
    let found = engine.filters().one(caller.id, filter_id(&path)?).await?;
    Ok(HttpResponse::Ok().json(Filter::from(&found)))
}

/// Changes one of the caller's filters (Mastodon v2): the fields given,
/// then `keywords_attributes` (with `id`: changed, with `_destroy`:
/// removed; without: added).
#[utoipa::path(
    tag = "mastodon",
    operation_id = "mastodon_filter_update",
    params(("id" = String, Path, description = "Filter id")),
    request_body(content = FilterBody, description = "JSON or a form"),
    responses(
        (status = 200, description = "The filter", body = Filter),
        (status = 400, description = "A field out of bounds", body = ErrorBody),
        (status = 404, description = "The caller has no filter of that id", body = ErrorBody),
        (status = 422, description = "Too many keywords", body = ErrorBody),
    )
)]
#[put("/filters/{id}")]
pub async fn update(
    req: HttpRequest,
    caller: Caller,
    engine: web::Data<Engine>,
    path: web::Path<String>,
    body: web::Bytes,
) -> Result<HttpResponse, AppError> {
    let id = filter_id(&path)?;
    let body: FilterBody = body_of(&req, &body)?;
    let changed = engine
        .filters()
        .update(caller.id, id, &body.input()?, &body.keyword_ops()?)
        .await?;
    Ok(HttpResponse::Ok().json(Filter::from(&changed)))
}

/// Removes one of the caller's filters (Mastodon v2).
#[utoipa::path(
    tag = "mastodon",
    operation_id = "mastodon_filter_delete",
    params(("id" = String, Path, description = "Filter id")),
    responses(
        (status = 200, description = "`{}`", body = Object),
        (status = 404, description = "The caller has no filter of that id", body = ErrorBody),
    )
)]
#[delete("/filters/{id}")]
pub async fn remove(
    caller: Caller,
    engine: web::Data<Engine>,
    path: web::Path<String>,
) -> Result<HttpResponse, AppError> {
    engine
        .filters()
        .delete(caller.id, filter_id(&path)?)
        .await?;
    Ok(HttpResponse::Ok().json(json!({})))
}

/// A filter's keywords (Mastodon v2).
#[utoipa::path(
    tag = "mastodon",
    operation_id = "mastodon_filter_keywords",
    params(("id" = String, Path, description = "Filter id")),
    responses(
        (status = 200, description = "Its keywords", body = Vec<FilterKeyword>),
        (status = 404, description = "The caller has no filter of that id", body = ErrorBody),
    )
)]
#[get("/filters/{id}/keywords")]
pub async fn list_keywords(
    caller: Caller,
    engine: web::Data<Engine>,
    path: web::Path<String>,
) -> Result<HttpResponse, AppError> {
    let (_, keywords) = engine.filters().one(caller.id, filter_id(&path)?).await?;
    let out: Vec<FilterKeyword> = keywords.iter().map(FilterKeyword::from).collect();
    Ok(HttpResponse::Ok().json(out))
}

/// Adds a keyword to a filter (Mastodon v2): `keyword`, `whole_word`.
#[utoipa::path(
    tag = "mastodon",
    operation_id = "mastodon_filter_keyword_add",
    params(("id" = String, Path, description = "Filter id")),
    request_body(content = KeywordBody, description = "JSON or a form"),
    responses(
        (status = 200, description = "The keyword", body = FilterKeyword),
        (status = 400, description = "A field missing or out of bounds", body = ErrorBody),
        (status = 404, description = "The caller has no filter of that id", body = ErrorBody),
        (status = 422, description = "Too many keywords", body = ErrorBody),
    )
)]
#[post("/filters/{id}/keywords")]
pub async fn add_keyword(
    req: HttpRequest,
    caller: Caller,
    engine: web::Data<Engine>,
    path: web::Path<String>,
    body: web::Bytes,
) -> Result<HttpResponse, AppError> {
    let id = filter_id(&path)?;
    let body: KeywordBody = body_of(&req, &body)?;
    let keyword = body
        .keyword
        .ok_or_else(|| AppError::BadRequest("keyword is required".into()))?;
    let whole_word = body.whole_word.as_ref().map(|v| flag("whole_word", v));
    let op = KeywordOp::Add {
        keyword,
        whole_word: whole_word.transpose()?.unwrap_or(true),
    };
    let (_, keywords) = engine
        .filters()
        .update(caller.id, id, &FilterInput::default(), &[op])
        .await?;
    let added = keywords.last().map(FilterKeyword::from);
    Ok(HttpResponse::Ok().json(added))
}

/// One of the caller's filter keywords (Mastodon v2).
#[utoipa::path(
    tag = "mastodon",
    operation_id = "mastodon_filter_keyword",
    params(("id" = String, Path, description = "Keyword id")),
    responses(
        (status = 200, description = "The keyword", body = FilterKeyword),
        (status = 404, description = "The caller has no keyword of that id", body = ErrorBody),
    )
)]
#[get("/filters/keywords/{id}")]
pub async fn get_keyword(
    caller: Caller,
    engine: web::Data<Engine>,
    path: web::Path<String>,
) -> Result<HttpResponse, AppError> {
    let (_, found) = keyword_of(&engine, &caller, &path).await?;
    Ok(HttpResponse::Ok().json(FilterKeyword::from(&found)))
}

/// Changes one of the caller's filter keywords (Mastodon v2).
#[utoipa::path(
    tag = "mastodon",
    operation_id = "mastodon_filter_keyword_update",
    params(("id" = String, Path, description = "Keyword id")),
    request_body(content = KeywordBody, description = "JSON or a form"),
    responses(
        (status = 200, description = "The keyword", body = FilterKeyword),
        (status = 400, description = "A field out of bounds", body = ErrorBody),
        (status = 404, description = "The caller has no keyword of that id", body = ErrorBody),
    )
)]
#[put("/filters/keywords/{id}")]
pub async fn update_keyword(
    req: HttpRequest,
    caller: Caller,
    engine: web::Data<Engine>,
    path: web::Path<String>,
    body: web::Bytes,
) -> Result<HttpResponse, AppError> {
    let (keyword_id, found) = keyword_of(&engine, &caller, &path).await?;
    let body: KeywordBody = body_of(&req, &body)?;
    let whole_word = body.whole_word.as_ref().map(|v| flag("whole_word", v));
    let op = KeywordOp::Change {
        id: keyword_id,
        keyword: body.keyword,
        whole_word: whole_word.transpose()?,
    };
    let (_, keywords) = engine
        .filters()
        .update(caller.id, found.filter_id, &FilterInput::default(), &[op])
        .await?;
    let changed = keywords.iter().find(|k| k.id == keyword_id);
    Ok(HttpResponse::Ok().json(changed.map(FilterKeyword::from)))
}

/// Removes one of the caller's filter keywords (Mastodon v2).
#[utoipa::path(
    tag = "mastodon",
    operation_id = "mastodon_filter_keyword_delete",
    params(("id" = String, Path, description = "Keyword id")),
    responses(
        (status = 200, description = "`{}`", body = Object),
        (status = 404, description = "The caller has no keyword of that id", body = ErrorBody),
    )
)]
#[delete("/filters/keywords/{id}")]
pub async fn remove_keyword(
    caller: Caller,
    engine: web::Data<Engine>,
    path: web::Path<String>,
) -> Result<HttpResponse, AppError> {
    let (keyword_id, found) = keyword_of(&engine, &caller, &path).await?;
    let op = KeywordOp::Remove(keyword_id);
    engine
        .filters()
        .update(caller.id, found.filter_id, &FilterInput::default(), &[op])
        .await?;
    Ok(HttpResponse::Ok().json(json!({})))
}

/// One of the caller's keywords by the id in a path.
async fn keyword_of(
    engine: &Engine,
    caller: &Caller,
    raw: &str,
) -> Result<(i64, KeywordRow), AppError> {
    let id = crate::domain::parse_id(raw, "keyword id").map_err(AppError::BadRequest)?;
    let filter = engine.filters().filter_of_keyword(caller.id, id).await?;
    let (_, keywords) = engine.filters().one(caller.id, filter).await?;
    let found = keywords.into_iter().find(|k| k.id == id);
    let found =
        found.ok_or_else(|| AppError::NotFound(format!("filter keyword {id} does not exist")))?;
    Ok((id, found))
}
