//! Request-rate limits: keyed token buckets (GCRA, from `governor`).
//!
//! - per user (a token's `sub`), stricter for writes than for reads, on by
//!   default at rates no honest client reaches; admin tokens are exempt;
//! - per client address, off by default (behind a proxy every client shares
//!   one address); the address is the peer's, or the last one of a header a
//!   trusted proxy sets.
//!
//! A refused request answers 429 `rate_limited` with `Retry-After`.

use std::net::IpAddr;
use std::num::NonZeroU32;
use std::time::Duration;

use actix_web::body::MessageBody;
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::Method;
use actix_web::middleware::Next;
use actix_web::web;
use governor::clock::{Clock, DefaultClock};
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};

use crate::error::AppError;
use crate::settings::LimitSettings;

pub struct Limits {
    reads: Option<DefaultKeyedRateLimiter<i64>>,
    writes: Option<DefaultKeyedRateLimiter<i64>>,
    addresses: Option<DefaultKeyedRateLimiter<IpAddr>>,
    /// Lower-case header name, if a trusted proxy sets the client address.
    proxy_header: Option<String>,
}

fn quota(per_sec: u32, burst: u32) -> Option<Quota> {
    let rate = NonZeroU32::new(per_sec)?;
    let burst = NonZeroU32::new(burst).unwrap_or(rate);
    Some(Quota::per_second(rate).allow_burst(burst))
}

fn limiter<K: std::hash::Hash + Eq + Clone>(
    q: Option<Quota>,
) -> Option<DefaultKeyedRateLimiter<K>> {
    q.map(RateLimiter::keyed)
}

impl Limits {
    pub fn new(s: &LimitSettings) -> Self {
        let users = |rate, burst| {
            if s.enabled {
                limiter(quota(rate, burst))
            } else {
                None
            }
        };
        Limits {
            reads: users(s.user_reads_per_sec, s.user_read_burst),
            writes: users(s.user_writes_per_sec, s.user_write_burst),
            addresses: limiter(quota(s.ip_per_sec, s.ip_burst)),
            proxy_header: (!s.trusted_proxy_header.is_empty())
                .then(|| s.trusted_proxy_header.to_ascii_lowercase()),
        }
    }

    /// Charges one request of `user` (a read for GET and HEAD, else a write).
    pub fn charge_user(&self, user: i64, method: &Method) -> Result<(), AppError> {
        let read = method == Method::GET || method == Method::HEAD;
        let limiter = if read { &self.reads } else { &self.writes };
        match limiter {
            Some(l) => charge(l, &user, if read { "reads" } else { "writes" }),
            None => Ok(()),
        }
    }

    /// The client address of a request: the trusted proxy's header, else
    /// the peer.
    fn address(&self, req: &ServiceRequest) -> Option<IpAddr> {
        if let Some(name) = &self.proxy_header {
            return req
                .headers()
                .get(name.as_str())
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.rsplit(',').next())
                .and_then(|v| v.trim().parse().ok());
        }
        req.peer_addr().map(|a| a.ip())
    }

    /// Forgets buckets that are full again, so memory follows active
    /// clients (run now and then).
    pub fn shrink(&self) {
        for l in [&self.reads, &self.writes].into_iter().flatten() {
            l.retain_recent();
            l.shrink_to_fit();
        }
        if let Some(l) = &self.addresses {
            l.retain_recent();
            l.shrink_to_fit();
        }
    }
}

fn charge<K: std::hash::Hash + Eq + Clone>(
    limiter: &DefaultKeyedRateLimiter<K>,
    key: &K,
    what: &str,
) -> Result<(), AppError> {
    limiter.check_key(key).map_err(|not_until| {
        let wait = not_until.wait_time_from(DefaultClock::default().now());
        AppError::RateLimited {
            message: format!("too many {what}: retry in {} ms", wait.as_millis()),
            retry_after_secs: wait.as_secs() + u64::from(wait.subsec_nanos() > 0),
        }
    })
}

/// The per-address limit, before anything else of the request runs.
pub async fn per_address(
    req: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<actix_web::body::EitherBody<impl MessageBody>>, actix_web::Error> {
    let refused = req.app_data::<web::Data<Limits>>().and_then(|limits| {
        let l = limits.addresses.as_ref()?;
        let address = limits.address(&req)?;
        charge(l, &address, "requests from this address").err()
    });
    match refused {
        Some(e) => Ok(req.error_response(e).map_into_right_body()),
        None => Ok(next.call(req).await?.map_into_left_body()),
    }
}

/// Shrinks the buckets every minute until the process stops.
pub async fn shrink_forever(limits: web::Data<Limits>) {
    loop {
        tokio::time::sleep(Duration::from_secs(60)).await;
        limits.shrink();
    }
}
