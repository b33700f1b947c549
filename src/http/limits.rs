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
use crate::types::UserId;

pub struct Limits {
    reads: Option<DefaultKeyedRateLimiter<UserId>>,
    writes: Option<DefaultKeyedRateLimiter<UserId>>,
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
    pub fn charge_user(&self, user: UserId, method: &Method) -> Result<(), AppError> {
        let read = method == Method::GET || method == Method::HEAD;
        let limiter = if read { &self.reads } else { &self.writes };
        match limiter {
            Some(l) => charge(l, &user, if read { "reads" } else { "writes" }),
            None => Ok(()),
        }
    }

    /// The client a request is charged to: the address the trusted proxy's
    /// header gives, else (header missing or not an address) the peer's,
    /// so that no request goes uncharged. An IPv6 client is its /64, the
    /// block one subscriber holds: rotating addresses inside it is one
    /// client, and the buckets stay as many as the clients.
    fn address(&self, req: &actix_web::HttpRequest) -> Option<IpAddr> {
        let proxied = self.proxy_header.as_ref().and_then(|name| {
            req.headers()
                .get(name.as_str())
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.rsplit(',').next())
                .and_then(|v| v.trim().parse::<IpAddr>().ok())
        });
        proxied
            .or_else(|| req.peer_addr().map(|a| a.ip()))
            .map(client_of)
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

/// An address as a rate-limit key: IPv4 whole (or mapped in IPv6), IPv6
/// as its /64.
fn client_of(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(_) => ip,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let s = v6.segments();
                IpAddr::V6(std::net::Ipv6Addr::new(s[0], s[1], s[2], s[3], 0, 0, 0, 0))
            }
        },
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

/// The client a request comes from, as the limits place it (the trusted
/// proxy's header, else the peer; an IPv6 client as its /64).
pub fn client_address(req: &actix_web::HttpRequest) -> Option<IpAddr> {
    match req.app_data::<web::Data<Limits>>() {
        Some(limits) => limits.address(req),
        None => req.peer_addr().map(|a| client_of(a.ip())),
    }
}

/// Charges one read of `user` to its budget, as a request would be (for
/// what a client does on a connection it holds: a stream's messages).
pub fn charge_read(req: &actix_web::HttpRequest, user: UserId) -> Result<(), AppError> {
    match req.app_data::<web::Data<Limits>>() {
        Some(limits) => limits.charge_user(user, &Method::GET),
        None => Ok(()),
    }
}

/// The per-address limit, before anything else of the request runs.
pub async fn per_address(
    req: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<actix_web::body::EitherBody<impl MessageBody>>, actix_web::Error> {
    let refused = req.app_data::<web::Data<Limits>>().and_then(|limits| {
        let l = limits.addresses.as_ref()?;
        let address = limits.address(req.request())?;
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

#[cfg(test)]
mod tests {
    use super::*;
    use actix_web::test::TestRequest;

    fn limits(header: &str) -> Limits {
        Limits::new(&LimitSettings {
            enabled: true,
            user_reads_per_sec: 1,
            user_read_burst: 1,
            user_writes_per_sec: 1,
            user_write_burst: 1,
            ip_per_sec: 1,
            ip_burst: 1,
            trusted_proxy_header: header.into(),
        })
    }

    fn request(header: Option<&str>) -> actix_web::HttpRequest {
        let mut req = TestRequest::default().peer_addr("10.0.0.9:4000".parse().unwrap());
        if let Some(v) = header {
            req = req.insert_header(("x-forwarded-for", v));
        }
        req.to_http_request()
    }

    #[test]
    fn a_request_the_proxy_header_cannot_place_is_charged_to_its_peer() {
        let l = limits("x-forwarded-for");
        let peer: IpAddr = "10.0.0.9".parse().unwrap();
        for garbage in [
            None,
            Some("not an address"),
            Some(""),
            Some("1.2.3.4, nonsense"),
        ] {
            assert_eq!(l.address(&request(garbage)), Some(peer), "{garbage:?}");
        }
        let proxied = l.address(&request(Some("192.0.2.1, 198.51.100.7")));
        assert_eq!(proxied, Some("198.51.100.7".parse().unwrap()));
    }

    #[test]
    fn rotating_ipv6_addresses_inside_one_64_are_one_client() {
        let l = limits("x-forwarded-for");
        let keys: std::collections::HashSet<_> = (0..1000)
            .map(|i| l.address(&request(Some(&format!("2001:db8:1:2:{i:x}::{i:x}")))))
            .collect();
        assert_eq!(keys.len(), 1);
        let other = l.address(&request(Some("2001:db8:1:3::1")));
        assert!(!keys.contains(&other));
        // Past its burst, the /64 is refused whichever address it uses.
        let limiter = l.addresses.as_ref().unwrap();
        let key = l.address(&request(Some("2001:db8:1:2::1"))).unwrap();
        assert!(charge(limiter, &key, "requests").is_ok());
        let next = l.address(&request(Some("2001:db8:1:2:ffff::2"))).unwrap();
        assert!(charge(limiter, &next, "requests").is_err());
    }
}
