//! The OpenAPI document, collected from the route table, and its two
//! routes: `GET /openapi.json` and the Swagger UI at `GET /docs` (its files
//! are in the binary: it works with no network).
//!
//! The errors every operation can answer are added here, in one place,
//! rather than on each handler: 401 on every `/api/v1` route (with the
//! bearer scheme, and 404 for a deleted account's token), 400 where there
//! are parameters or a body, 413 where there is a body, 429, 503 and 500
//! everywhere.

use actix_web::{web, App, HttpResponse};
use utoipa::openapi::path::Operation;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityRequirement, SecurityScheme};
use utoipa::openapi::{
    ContentBuilder, InfoBuilder, OpenApi, Ref, ResponseBuilder, ResponsesBuilder,
};
use utoipa::{PartialSchema, ToSchema};
use utoipa_actix_web::AppExt;
use utoipa_swagger_ui::SwaggerUi;

use super::errors::{ErrorBody, ErrorCode, ErrorDetail};
use super::RouteTable;

/// The `/api` routes that need no token (as on Mastodon).
const PUBLIC: [&str; 4] = [
    "/api/v1/custom_emojis",
    "/api/v1/instance",
    "/api/v2/instance",
    "/api/v1/streaming/health",
];

/// The document of the routes [`super::routes`] registers.
pub fn document(metrics_here: bool) -> OpenApi {
    let (_, mut api) = App::new()
        .into_utoipa_app()
        .configure(|cfg| super::routes(cfg, metrics_here))
        .split_for_parts();
    api.info = InfoBuilder::new()
        .title("feed-service")
        .version(env!("CARGO_PKG_VERSION"))
        .description(Some(
            "A push/pull hybrid follow feed. Every `/api/v1` route needs \
             `Authorization: Bearer <JWT>` (HS256; `sub` the user id, `exp`, optionally \
             `role: \"admin\"`). Every error is `{\"error\": {\"code\", \"message\"}}`.",
        ))
        .build();
    let components = api.components.get_or_insert_with(Default::default);
    components.add_security_scheme(
        "bearer",
        SecurityScheme::Http(
            HttpBuilder::new()
                .scheme(HttpAuthScheme::Bearer)
                .bearer_format("JWT")
                .build(),
        ),
    );
    for (name, schema) in [
        ("ErrorBody", ErrorBody::schema()),
        ("ErrorDetail", ErrorDetail::schema()),
        ("ErrorCode", ErrorCode::schema()),
    ] {
        components.schemas.insert(name.to_string(), schema);
    }
    for (path, item) in api.paths.paths.iter_mut() {
        let authenticated = path.starts_with("/api/") && !PUBLIC.contains(&path.as_str());
        for op in operations(item) {
            common_errors(op, authenticated);
        }
    }
    api
}

fn operations(item: &mut utoipa::openapi::PathItem) -> impl Iterator<Item = &mut Operation> {
    [
        item.get.as_mut(),
        item.put.as_mut(),
        item.post.as_mut(),
        item.delete.as_mut(),
        item.patch.as_mut(),
        item.head.as_mut(),
    ]
    .into_iter()
    .flatten()
}

/// Adds the errors any operation of its kind can answer.
fn common_errors(op: &mut Operation, authenticated: bool) {
    let error = |description: &str| {
        ResponseBuilder::new()
            .description(description)
            .content(
                "application/json",
                ContentBuilder::new()
                    .schema(Some(Ref::from_schema_name(ErrorBody::name())))
                    .build(),
            )
            .build()
    };
    let has_params = op.parameters.as_ref().is_some_and(|p| !p.is_empty());
    let has_body = op.request_body.is_some();
    let mut extra = Vec::new();
    if has_params || has_body {
        extra.push(("400", "Malformed parameters or body (`bad_request`)"));
    }
    if authenticated {
        extra.push(("401", "No token, a bad or expired one (`unauthorized`)"));
        extra.push((
            "404",
            "The token's account is deleted, or what is named is not there (`not_found`)",
        ));
        op.security = Some(vec![SecurityRequirement::new::<_, _, &str>("bearer", [])]);
    }
    // Per user, and per client address when that limit is on.
    extra.push((
        "429",
        "Too many requests: see `Retry-After` (`rate_limited`)",
    ));
    if has_body {
        extra.push(("413", "Request body over 64 KiB (`payload_too_large`)"));
    }
    extra.push(("500", "A bug: the log has the cause (`internal`)"));
    extra.push((
        "503",
        "A store is down or saturated; retry later (`unavailable`)",
    ));
    for (status, description) in extra {
        op.responses
            .responses
            .entry(status.to_string())
            .or_insert_with(|| {
                let mut response = error(description);
                if status == "429" {
                    response.headers.insert(
                        "Retry-After".into(),
                        utoipa::openapi::HeaderBuilder::new()
                            .schema(Some(i64::schema()))
                            .description(Some("Seconds to wait"))
                            .build()
                            .into(),
                    );
                }
                response.into()
            });
    }
    // Keep the responses ordered by status.
    let mut sorted: Vec<_> = std::mem::take(&mut op.responses.responses)
        .into_iter()
        .collect();
    sorted.sort_by(|a, b| a.0.cmp(&b.0));
    op.responses = sorted
        .into_iter()
        .fold(ResponsesBuilder::new(), |b, (k, v)| b.response(k, v))
        .build();
}

/// The routes of the document: what answers 405 rather than 404.
pub fn route_table(api: &OpenApi) -> RouteTable {
    RouteTable::new(api.paths.paths.iter().map(|(path, item)| {
        let methods = [
            ("GET", item.get.is_some()),
            ("PUT", item.put.is_some()),
            ("POST", item.post.is_some()),
            ("DELETE", item.delete.is_some()),
            ("PATCH", item.patch.is_some()),
        ]
        .into_iter()
        .filter(|(_, served)| *served)
        .map(|(m, _)| m.to_string())
        .collect();
        (path.as_str(), methods)
    }))
}

/// `GET /openapi.json` and the Swagger UI at `GET /docs/`.
pub fn service(api: OpenApi) -> SwaggerUi {
    SwaggerUi::new("/docs/{_:.*}").url("/openapi.json", api)
}

/// `GET /docs` (no slash) leads to the UI.
pub async fn docs_redirect() -> HttpResponse {
    HttpResponse::PermanentRedirect()
        .insert_header(("Location", "/docs/"))
        .finish()
}

/// Registers `/docs` without its slash.
pub fn docs_alias(cfg: &mut web::ServiceConfig) {
    cfg.route("/docs", web::get().to(docs_redirect));
}
