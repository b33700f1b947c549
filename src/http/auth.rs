//! Bearer-token authentication: an HS256 JWT with `sub` (user id), `exp`,
//! and optionally `role: "admin"`; `nbf` honoured, `iss` and `aud` required
//! when configured, a leeway for clock skew, and a previous secret accepted
//! while a new one is rolled out. Authenticating a caller also charges its
//! request-rate budget ([`super::limits`]).

use std::future::{ready, Ready};

use actix_web::{dev::Payload, web, FromRequest, HttpRequest};
use jsonwebtoken::{decode, encode, Algorithm, DecodingKey, EncodingKey, Header, Validation};
use serde::{Deserialize, Serialize};

use crate::error::AppError;
use crate::settings::AuthSettings;
use crate::types::UserId;
use secrecy::ExposeSecret;

#[derive(Debug, Serialize, Deserialize)]
pub struct Claims {
    pub sub: String,
    pub exp: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nbf: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iat: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iss: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aud: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
}

/// The keys derived from the shared secret (and the one being rotated
/// out), and what a token must carry.
#[derive(Clone)]
pub struct JwtKeys {
    encoding: EncodingKey,
    /// The current secret's key first, then the previous one's.
    decoding: Vec<DecodingKey>,
    validation: Validation,
    issuer: Option<String>,
    audience: Option<String>,
}

impl JwtKeys {
    /// Keys for `secret` alone, checking `exp` and `nbf` with no leeway.
    pub fn new(secret: &[u8]) -> Result<Self, AppError> {
        Self::build(secret, None, 0, None, None)
    }

    /// Keys as configured: the secret and the previous one, the leeway, and
    /// the issuer and audience when set (then required).
    pub fn from_settings(auth: &AuthSettings) -> Result<Self, AppError> {
        let nonempty = |s: &str| (!s.is_empty()).then(|| s.to_string());
        Self::build(
            auth.jwt_secret.expose_secret().as_bytes(),
            auth.previous_secret().map(str::as_bytes),
            auth.leeway_secs,
            nonempty(&auth.issuer),
            nonempty(&auth.audience),
        )
    }

    fn build(
        secret: &[u8],
        previous: Option<&[u8]>,
        leeway: u64,
        issuer: Option<String>,
        audience: Option<String>,
    ) -> Result<Self, AppError> {
        let mut validation = Validation::new(Algorithm::HS256);
        validation.leeway = leeway;
        validation.validate_nbf = true;
        let mut required = vec!["exp", "sub"];
        match &issuer {
            Some(iss) => {
                validation.set_issuer(&[iss]);
                required.push("iss");
            }
            None => validation.iss = None,
        }
        match &audience {
            Some(aud) => {
                validation.set_audience(&[aud]);
                required.push("aud");
            }
            None => validation.validate_aud = false,
        }
        validation.set_required_spec_claims(&required);
        let key = |s: &[u8]| {
            DecodingKey::from_secret(s).map_err(|e| AppError::internal("auth.jwt_secret", e))
        };
        let mut decoding = vec![key(secret)?];
        if let Some(previous) = previous {
            decoding.push(key(previous)?);
        }
        Ok(JwtKeys {
            encoding: EncodingKey::from_secret(secret)
                .map_err(|e| AppError::internal("auth.jwt_secret", e))?,
            decoding,
            validation,
            issuer,
            audience,
        })
    }

    /// Mints a token for `user`, valid from now for `ttl_secs`, carrying
    /// what [`Self::verify`] checks.
    pub fn mint(&self, user: UserId, admin: bool, ttl_secs: u64) -> Result<String, AppError> {
        let now = crate::engine::now_ms() as u64 / 1000;
        let claims = Claims {
            sub: user.to_string(),
            exp: now + ttl_secs,
            nbf: Some(now),
            iat: Some(now),
            iss: self.issuer.clone(),
            aud: self.audience.clone(),
            role: admin.then(|| "admin".to_string()),
        };
        encode(&Header::new(Algorithm::HS256), &claims, &self.encoding)
            .map_err(|e| AppError::internal("signing a token", e))
    }

    pub fn verify(&self, token: &str) -> Result<Caller, AppError> {
        let mut last = None;
        let mut data = None;
        for key in &self.decoding {
            match decode::<Claims>(token, key, &self.validation) {
                Ok(d) => {
                    data = Some(d);
                    break;
                }
                Err(e) => last = Some(e),
            }
        }
        let data = data.ok_or_else(|| {
            AppError::Unauthorized(match last {
                Some(e) => format!("invalid token: {e}"),
                None => "invalid token".into(),
            })
        })?;
        let id = data
            .claims
            .sub
            .parse::<i64>()
            .ok()
            .filter(|id| *id >= 0)
            .map(UserId)
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
    pub id: UserId,
    pub admin: bool,
}

impl Caller {
    /// Allows acting for `user`: that user itself, or an admin.
    pub fn may_act_for(&self, user: UserId) -> Result<(), AppError> {
        if self.admin || self.id == user {
            Ok(())
        } else {
            Err(AppError::Forbidden(format!(
                "user {} may not act for user {user}",
                self.id
            )))
        }
    }

    /// Whose view a read takes: the caller's, or none for an admin (who
    /// sees everything).
    pub fn viewer(&self) -> Option<UserId> {
        (!self.admin).then_some(self.id)
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

/// The caller of a streaming request: its bearer token or, as browsers'
/// `EventSource` sends no header (and Mastodon allows), an `access_token`
/// query parameter. (A token in a URL may reach access logs: prefer the
/// header.) Opening a stream is charged to the caller's request-rate
/// budget, as any read.
pub fn streaming_caller(req: &HttpRequest) -> Result<Caller, AppError> {
    if req
        .headers()
        .contains_key(actix_web::http::header::AUTHORIZATION)
    {
        return authenticate_and_charge(req);
    }
    let token = serde_urlencoded::from_str::<Vec<(String, String)>>(req.query_string())
        .ok()
        .and_then(|pairs| pairs.into_iter().find(|(k, _)| k == "access_token"))
        .map(|(_, token)| token)
        .filter(|t| !t.is_empty())
        .ok_or_else(|| {
            AppError::Unauthorized("missing Authorization header or access_token".into())
        })?;
    charged_token_caller(req, &token)
}

/// The caller a token names, charged one read (see [`streaming_caller`]).
pub fn charged_token_caller(req: &HttpRequest, token: &str) -> Result<Caller, AppError> {
    let caller = token_caller(req, token)?;
    charge(req, caller)
}

/// The caller a token names (a token sent some other way than the
/// Authorization header: a WebSocket's protocol, a query parameter).
pub fn token_caller(req: &HttpRequest, token: &str) -> Result<Caller, AppError> {
    let keys = req.app_data::<web::Data<JwtKeys>>().ok_or_else(|| {
        AppError::internal(
            "JWT keys are not configured",
            crate::error::Message("missing app data".into()),
        )
    })?;
    keys.verify(token)
}

/// Authenticates, then charges the caller's request-rate budget (admins
/// are not limited).
fn authenticate_and_charge(req: &HttpRequest) -> Result<Caller, AppError> {
    let caller = authenticate(req)?;
    charge(req, caller)
}

fn charge(req: &HttpRequest, caller: Caller) -> Result<Caller, AppError> {
    if !caller.admin {
        if let Some(limits) = req.app_data::<web::Data<super::limits::Limits>>() {
            limits.charge_user(caller.id, req.method())?;
        }
    }
    Ok(caller)
}

/// The caller of a route that answers a deleted account's token: its own
/// deletion (a repeated `DELETE` answers the same job) and its jobs. Every
/// other route takes a [`Caller`], whose account must exist.
#[derive(Debug, Clone, Copy)]
pub struct Token(pub Caller);

impl FromRequest for Token {
    type Error = AppError;
    type Future = Ready<Result<Self, Self::Error>>;

    fn from_request(req: &HttpRequest, _: &mut Payload) -> Self::Future {
        ready(authenticate_and_charge(req).map(Token))
    }
}

impl FromRequest for Caller {
    type Error = AppError;
    type Future = futures::future::LocalBoxFuture<'static, Result<Self, Self::Error>>;

    /// The token's caller, charged, whose account exists (a deleted
    /// account's token reads and writes nothing: 404).
    fn from_request(req: &HttpRequest, _: &mut Payload) -> Self::Future {
        let caller = authenticate_and_charge(req);
        let engine = req.app_data::<web::Data<crate::engine::Engine>>().cloned();
        Box::pin(async move {
            let caller = caller?;
            member(engine.as_ref().map(|e| e.get_ref()), caller).await
        })
    }
}

/// `caller` if its account exists (admins need none).
pub async fn member(
    engine: Option<&crate::engine::Engine>,
    caller: Caller,
) -> Result<Caller, AppError> {
    match engine {
        Some(engine) if !caller.admin && !engine.account_exists(caller.id).await => Err(
            AppError::NotFound(format!("user {} does not exist", caller.id)),
        ),
        _ => Ok(caller),
    }
}

/// An authenticated admin.
#[derive(Debug, Clone, Copy)]
pub struct Admin(pub Caller);

impl FromRequest for Admin {
    type Error = AppError;
    type Future = Ready<Result<Self, Self::Error>>;

    fn from_request(req: &HttpRequest, _: &mut Payload) -> Self::Future {
        ready(authenticate_and_charge(req).and_then(|caller| {
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
        let keys = JwtKeys::new(b"0123456789abcdef0123456789abcdef").unwrap();
        let t = keys.mint(UserId(42), false, 60).unwrap();
        assert_eq!(
            keys.verify(&t).unwrap(),
            Caller {
                id: UserId(42),
                admin: false
            }
        );
        let t = keys.mint(UserId(0), true, 60).unwrap();
        assert!(keys.verify(&t).unwrap().admin);
        let other = JwtKeys::new(b"another-secret-of-length-thirty-two").unwrap();
        assert!(matches!(other.verify(&t), Err(AppError::Unauthorized(_))));
        assert!(matches!(
            keys.verify("not.a.jwt"),
            Err(AppError::Unauthorized(_))
        ));
    }

    fn auth(secret: &str, previous: Option<&str>, iss: &str, aud: &str) -> AuthSettings {
        AuthSettings {
            jwt_secret: secret.to_string().into(),
            previous_jwt_secret: previous.map(|p| p.to_string().into()),
            allow_dev_secret: false,
            leeway_secs: 30,
            issuer: iss.into(),
            audience: aud.into(),
        }
    }

    fn signed(secret: &str, claims: serde_json::Value) -> String {
        encode(
            &Header::new(Algorithm::HS256),
            &claims,
            &EncodingKey::from_secret(secret.as_bytes()).unwrap(),
        )
        .unwrap()
    }

    #[test]
    fn issuer_audience_nbf_and_leeway_are_checked() {
        const S: &str = "0123456789abcdef0123456789abcdef";
        let keys = JwtKeys::from_settings(&auth(S, None, "apps", "feed")).unwrap();
        let now = crate::engine::now_ms() as u64 / 1000;
        assert!(keys
            .verify(&keys.mint(UserId(7), false, 60).unwrap())
            .is_ok());
        let ok = serde_json::json!({"sub": "7", "exp": now + 60, "iss": "apps", "aud": "feed"});
        assert!(keys.verify(&signed(S, ok.clone())).is_ok());
        for bad in [
            serde_json::json!({"sub": "7", "exp": now + 60, "aud": "feed"}),
            serde_json::json!({"sub": "7", "exp": now + 60, "iss": "other", "aud": "feed"}),
            serde_json::json!({"sub": "7", "exp": now + 60, "iss": "apps", "aud": "other"}),
            serde_json::json!({"sub": "7", "exp": now + 60, "iss": "apps", "aud": "feed", "nbf": now + 120}),
            serde_json::json!({"sub": "7", "exp": now - 60, "iss": "apps", "aud": "feed"}),
            serde_json::json!({"sub": "7", "iss": "apps", "aud": "feed"}),
        ] {
            assert!(keys.verify(&signed(S, bad.clone())).is_err(), "{bad}");
        }
        // Within the leeway.
        let skewed = serde_json::json!({"sub": "7", "exp": now - 10, "nbf": now + 10, "iss": "apps", "aud": "feed"});
        assert!(keys.verify(&signed(S, skewed)).is_ok());
    }

    #[test]
    fn the_previous_secret_is_accepted_during_a_rotation() {
        const OLD: &str = "the-old-secret-of-thirty-two-bytes!!";
        const NEW: &str = "the-new-secret-of-thirty-two-bytes!!";
        let before = JwtKeys::from_settings(&auth(OLD, None, "", "")).unwrap();
        let during = JwtKeys::from_settings(&auth(NEW, Some(OLD), "", "")).unwrap();
        let after = JwtKeys::from_settings(&auth(NEW, None, "", "")).unwrap();
        let old_token = before.mint(UserId(3), false, 60).unwrap();
        let new_token = during.mint(UserId(3), false, 60).unwrap();
        assert!(during.verify(&old_token).is_ok());
        assert!(during.verify(&new_token).is_ok());
        assert!(after.verify(&new_token).is_ok());
        assert!(after.verify(&old_token).is_err());
    }
}
