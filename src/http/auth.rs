//! Bearer-token authentication: an HS256 JWT with `sub` (user id), `exp`,
//! and optionally `role: "admin"`.

use std::future::{ready, Ready};

use actix_web::{dev::Payload, web, FromRequest, HttpRequest};
use jsonwebtoken::{decode, encode, Algorithm, DecodingKey, EncodingKey, Header, Validation};
use serde::{Deserialize, Serialize};

use crate::error::AppError;

#[derive(Debug, Serialize, Deserialize)]
pub struct Claims {
    pub sub: String,
    pub exp: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
}

/// The keys derived from the shared secret.
#[derive(Clone)]
pub struct JwtKeys {
    encoding: EncodingKey,
    decoding: DecodingKey,
    validation: Validation,
}

impl JwtKeys {
    pub fn new(secret: &[u8]) -> Result<Self, AppError> {
        let mut validation = Validation::new(Algorithm::HS256);
        validation.leeway = 0;
        Ok(JwtKeys {
            encoding: EncodingKey::from_secret(secret)
                .map_err(|e| AppError::internal("auth.jwt_secret", e))?,
            decoding: DecodingKey::from_secret(secret)
                .map_err(|e| AppError::internal("auth.jwt_secret", e))?,
            validation,
        })
    }

    /// Mints a token for `user`, valid for `ttl_secs`.
    pub fn mint(&self, user: i64, admin: bool, ttl_secs: u64) -> Result<String, AppError> {
        let claims = Claims {
            sub: user.to_string(),
            exp: crate::engine::now_ms() as u64 / 1000 + ttl_secs,
            role: admin.then(|| "admin".to_string()),
        };
        encode(&Header::new(Algorithm::HS256), &claims, &self.encoding)
            .map_err(|e| AppError::internal("signing a token", e))
    }

    pub fn verify(&self, token: &str) -> Result<Caller, AppError> {
        let data = decode::<Claims>(token, &self.decoding, &self.validation)
            .map_err(|e| AppError::Unauthorized(format!("invalid token: {e}")))?;
        let id = data
            .claims
            .sub
            .parse::<i64>()
            .ok()
            .filter(|id| *id >= 0)
            .ok_or_else(|| AppError::Unauthorized("token subject is not a user id".into()))?;
        Ok(Caller {
            id,
            admin: data.claims.role.as_deref() == Some("admin"),
        })
    }
}

/// The authenticated caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Caller {
    pub id: i64,
    pub admin: bool,
}

impl Caller {
    /// Allows acting for `user`: that user itself, or an admin.
    pub fn may_act_for(&self, user: i64) -> Result<(), AppError> {
        if self.admin || self.id == user {
            Ok(())
        } else {
            Err(AppError::Forbidden(format!(
                "user {} may not act for user {user}",
                self.id
            )))
        }
    }
}

fn authenticate(req: &HttpRequest) -> Result<Caller, AppError> {
    let keys = req.app_data::<web::Data<JwtKeys>>().ok_or_else(|| {
        AppError::internal(
            "JWT keys are not configured",
            crate::error::Message("missing app data".into()),
        )
    })?;
    let header = req
        .headers()
        .get(actix_web::http::header::AUTHORIZATION)
        .ok_or_else(|| AppError::Unauthorized("missing Authorization header".into()))?;
    let value = header
        .to_str()
        .map_err(|_| AppError::Unauthorized("malformed Authorization header".into()))?;
    let token = value
        .strip_prefix("Bearer ")
        .or_else(|| value.strip_prefix("bearer "))
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .ok_or_else(|| AppError::Unauthorized("expected a Bearer token".into()))?;
    keys.verify(token)
}

impl FromRequest for Caller {
    type Error = AppError;
    type Future = Ready<Result<Self, Self::Error>>;

    fn from_request(req: &HttpRequest, _: &mut Payload) -> Self::Future {
        ready(authenticate(req))
    }
}

/// An authenticated admin.
#[derive(Debug, Clone, Copy)]
pub struct Admin(pub Caller);

impl FromRequest for Admin {
    type Error = AppError;
    type Future = Ready<Result<Self, Self::Error>>;

    fn from_request(req: &HttpRequest, _: &mut Payload) -> Self::Future {
        ready(authenticate(req).and_then(|caller| {
            if caller.admin {
                Ok(Admin(caller))
            } else {
                Err(AppError::Forbidden("admin role required".into()))
            }
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn minted_tokens_verify_and_carry_the_role() {
        let keys = JwtKeys::new(b"0123456789abcdef0123").unwrap();
        let t = keys.mint(42, false, 60).unwrap();
        assert_eq!(
            keys.verify(&t).unwrap(),
            Caller {
                id: 42,
                admin: false
            }
        );
        let t = keys.mint(0, true, 60).unwrap();
        assert!(keys.verify(&t).unwrap().admin);
        let other = JwtKeys::new(b"another-secret-of-length").unwrap();
        assert!(matches!(other.verify(&t), Err(AppError::Unauthorized(_))));
        assert!(matches!(
            keys.verify("not.a.jwt"),
            Err(AppError::Unauthorized(_))
        ));
    }
}
