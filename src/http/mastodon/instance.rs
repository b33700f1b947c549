use actix_web::{get, HttpRequest, HttpResponse};

use super::entities::{instance_v1, instance_v2, Origin};

/// The Mastodon version whose API this subset follows, as clients read it.
pub const VERSION: &str = concat!(
    "4.3.0 (compatible; feed-service ",
    env!("CARGO_PKG_VERSION"),
    ")"
);

/// The instance (Mastodon v1): enough for a client to start, with the
/// streaming URL. No token needed.
#[utoipa::path(
    tag = "mastodon",
    operation_id = "mastodon_instance_v1",
    responses((status = 200, description = "The instance", body = Object))
)]
#[get("/instance")]
pub async fn v1(req: HttpRequest) -> HttpResponse {
    HttpResponse::Ok().json(instance_v1(&Origin::of(&req), VERSION, 0))
}

/// The instance (Mastodon v2). No token needed.
#[utoipa::path(
    tag = "mastodon",
    operation_id = "mastodon_instance_v2",
    responses((status = 200, description = "The instance", body = Object))
)]
#[get("/instance")]
pub async fn v2(req: HttpRequest) -> HttpResponse {
    HttpResponse::Ok().json(instance_v2(&Origin::of(&req), VERSION))
}
