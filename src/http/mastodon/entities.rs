//! Mastodon's JSON shapes, built from the service's records, and its ids.
//!
//! A status id encodes the post's place in the feed: `1`, the score (the
//! post's millisecond) in 15 digits, then the post id in 20 digits, written
//! so that ids compare as the feed orders entries. Every id has 36 digits,
//! so the order Mastodon clients use (shorter is older, then lexical) and
//! the numeric order are both the timeline's, ties within a millisecond
//! included; and a bound given as an id pages exactly once.

use serde::Serialize;
use serde_json::json;

use crate::store::pg::{AccountRow, RelationshipRow};
use crate::types::{Entry, Post, PostId, UserId};

/// Digits of a status id: the leading `1`, 15 of score, 20 of post id.
const ID_DIGITS: usize = 36;
const SCORE_DIGITS: usize = 15;
/// Decimal digits of an `i64` at most.
const MEMBER_DIGITS: u32 = 19;

/// The status id of a feed entry.
pub fn status_id(entry: Entry) -> String {
    format!(
        "1{:0width$}{:020}",
        entry.score.clamp(0, 10_i64.pow(SCORE_DIGITS as u32) - 1),
        member_code(entry.id),
        width = SCORE_DIGITS
    )
}

/// The entry a status id names (none if it is not one this service gives).
pub fn parse_status_id(text: &str) -> Option<Entry> {
    if text.len() != ID_DIGITS
        || !text.starts_with('1')
        || !text.bytes().all(|b| b.is_ascii_digit())
    {
        return None;
    }
    let score: i64 = text[1..1 + SCORE_DIGITS].parse().ok()?;
    let code: u128 = text[1 + SCORE_DIGITS..].parse().ok()?;
    Some(Entry::new(score, PostId(member_of(code)?)))
}

/// A post id as base-11 digits (one per decimal digit, 1 to 10, then 0s):
/// fixed-width numbers that order as the ids' decimal bytes do, which is
/// how the feed orders ties.
fn member_code(id: PostId) -> u128 {
    let text = id.max(PostId(1)).to_string();
    let mut code: u128 = 0;
    for i in 0..MEMBER_DIGITS as usize {
        let symbol = text
            .as_bytes()
            .get(i)
            .map_or(0, |d| u128::from(d - b'0') + 1);
        code = code * 11 + symbol;
    }
    code
}

fn member_of(mut code: u128) -> Option<i64> {
    let mut symbols = [0u8; MEMBER_DIGITS as usize];
    for slot in symbols.iter_mut().rev() {
        *slot = (code % 11) as u8;
        code /= 11;
    }
    if code != 0 {
        return None;
    }
    let len = symbols.iter().take_while(|s| **s != 0).count();
    if len == 0 || symbols[len..].iter().any(|s| *s != 0) || symbols[0] == 1 {
        // No digits, a digit after the end, or a leading zero.
        return None;
    }
    let text: String = symbols[..len]
        .iter()
        .map(|s| (b'0' + s - 1) as char)
        .collect();
    text.parse().ok().filter(|id: &i64| *id > 0)
}

/// A post's status id.
pub fn post_status_id(post: &Post) -> String {
    status_id(Entry::new(post.created_at_ms, post.id))
}

/// Milliseconds since the epoch as ISO 8601 (UTC, milliseconds).
pub fn iso8601(ms: i64) -> String {
    let (days, ms_of_day) = (ms.div_euclid(86_400_000), ms.rem_euclid(86_400_000));
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    let secs = ms_of_day / 1000;
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        secs / 3600,
        secs / 60 % 60,
        secs % 60,
        ms_of_day % 1000
    )
}

/// A post's text as Mastodon's `content`: escaped HTML, a paragraph per
/// block separated by a blank line, `<br />` for other line breaks.
pub fn content(text: &str) -> String {
    let escaped = text
        .replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
        .replace('\'', "&#39;")
        .replace("\r\n", "\n");
    escaped
        .split("\n\n")
        .filter(|p| !p.is_empty())
        .map(|p| format!("<p>{}</p>", p.replace('\n', "<br />")))
        .collect()
}

/// Where the service is reached (`scheme://host`), for URLs in bodies.
#[derive(Debug, Clone)]
pub struct Origin(pub String);

/// `server.public_url` as an origin, when the operator set one.
#[derive(Debug, Clone, Default)]
pub struct PublicOrigin(pub Option<String>);

impl Origin {
    /// The configured public URL; else `http://` and the request's `Host`
    /// (a name a client chose, but only for its own response: headers a
    /// proxy may forward, which a client can forge for a cache's other
    /// clients, are never read), else the address the service listens on.
    pub fn of(req: &actix_web::HttpRequest) -> Self {
        let configured = req
            .app_data::<actix_web::web::Data<PublicOrigin>>()
            .and_then(|o| o.0.clone());
        configured.map(Origin).unwrap_or_else(|| {
            let host = req
                .headers()
                .get(actix_web::http::header::HOST)
                .and_then(|h| h.to_str().ok())
                .and_then(|h| crate::settings::public_origin(&format!("http://{h}")));
            Origin(host.unwrap_or_else(|| format!("http://{}", req.app_config().host())))
        })
    }

    fn host(&self) -> &str {
        self.0.split_once("://").map_or(&self.0, |(_, h)| h)
    }
}

/// An account, as Mastodon's Account.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[schema(as = MastodonAccount)]
pub struct Account {
    /// The user id, as a string.
    pub id: String,
    pub username: String,
    /// The username (every account is local).
    pub acct: String,
    pub display_name: String,
    pub locked: bool,
    pub bot: bool,
    pub group: bool,
    pub discoverable: bool,
    /// ISO 8601.
    pub created_at: String,
    pub note: String,
    pub url: String,
    pub uri: String,
    pub avatar: String,
    pub avatar_static: String,
    pub header: String,
    pub header_static: String,
    pub followers_count: i64,
    pub following_count: i64,
    /// Live posts.
    pub statuses_count: i64,
    /// The date (`YYYY-MM-DD`) of the newest post, if any.
    pub last_status_at: Option<String>,
    #[schema(value_type = Vec<Object>)]
    pub emojis: Vec<serde_json::Value>,
    #[schema(value_type = Vec<Object>)]
    pub fields: Vec<serde_json::Value>,
}

impl Account {
    pub fn new(row: &AccountRow, origin: &Origin) -> Self {
        let url = format!("{}/@{}", origin.0, row.username);
        let avatar = format!("{}/avatars/original/missing.png", origin.0);
        let header = format!("{}/headers/original/missing.png", origin.0);
        Account {
            id: row.id.to_string(),
            username: row.username.clone(),
            acct: row.username.clone(),
            display_name: row.username.clone(),
            locked: false,
            bot: false,
            group: false,
            discoverable: false,
            created_at: iso8601(row.created_at_ms),
            note: String::new(),
            uri: format!("{}/users/{}", origin.0, row.username),
            url,
            avatar_static: avatar.clone(),
            avatar,
            header_static: header.clone(),
            header,
            followers_count: row.follower_count,
            following_count: row.following_count,
            statuses_count: row.post_count,
            last_status_at: row.last_post_ms.map(|ms| iso8601(ms)[..10].to_string()),
            emojis: Vec::new(),
            fields: Vec::new(),
        }
    }
}

/// A post, as Mastodon's Status.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[schema(as = MastodonStatus)]
pub struct Status {
    /// The status id: 36 digits whose order is the timeline's.
    pub id: String,
    /// ISO 8601, to the millisecond.
    pub created_at: String,
    pub in_reply_to_id: Option<String>,
    pub in_reply_to_account_id: Option<String>,
    pub sensitive: bool,
    pub spoiler_text: String,
    /// Always `public`.
    pub visibility: &'static str,
    pub language: Option<String>,
    pub uri: String,
    pub url: String,
    pub replies_count: i64,
    pub reblogs_count: i64,
    pub favourites_count: i64,
    pub edited_at: Option<String>,
    pub favourited: bool,
    pub reblogged: bool,
    pub muted: bool,
    pub bookmarked: bool,
    pub pinned: bool,
    /// The text as escaped HTML.
    pub content: String,
    /// The text as posted.
    pub text: String,
    #[schema(value_type = Option<Object>)]
    pub reblog: Option<serde_json::Value>,
    #[schema(value_type = Option<Object>)]
    pub application: Option<serde_json::Value>,
    pub account: Account,
    #[schema(value_type = Vec<Object>)]
    pub media_attachments: Vec<serde_json::Value>,
    #[schema(value_type = Vec<Object>)]
    pub mentions: Vec<serde_json::Value>,
    #[schema(value_type = Vec<Object>)]
    pub tags: Vec<serde_json::Value>,
    #[schema(value_type = Vec<Object>)]
    pub emojis: Vec<serde_json::Value>,
    #[schema(value_type = Vec<Object>)]
    pub filtered: Vec<serde_json::Value>,
    #[schema(value_type = Option<Object>)]
    pub card: Option<serde_json::Value>,
    #[schema(value_type = Option<Object>)]
    pub poll: Option<serde_json::Value>,
}

impl Status {
    pub fn new(post: &Post, author: &AccountRow, origin: &Origin) -> Self {
        let id = post_status_id(post);
        Status {
            uri: format!("{}/users/{}/statuses/{id}", origin.0, author.username),
            url: format!("{}/@{}/{id}", origin.0, author.username),
            id,
            created_at: iso8601(post.created_at_ms),
            in_reply_to_id: None,
            in_reply_to_account_id: None,
            sensitive: false,
            spoiler_text: String::new(),
            visibility: "public",
            language: None,
            replies_count: 0,
            reblogs_count: 0,
            favourites_count: 0,
            edited_at: None,
            favourited: false,
            reblogged: false,
            muted: false,
            bookmarked: false,
            pinned: false,
            content: content(&post.body),
            text: post.body.clone(),
            reblog: None,
            application: None,
            account: Account::new(author, origin),
            media_attachments: Vec::new(),
            mentions: Vec::new(),
            tags: Vec::new(),
            emojis: Vec::new(),
            filtered: Vec::new(),
            card: None,
            poll: None,
        }
    }
}

/// How the caller stands to an account, as Mastodon's Relationship.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[schema(as = MastodonRelationship)]
pub struct Relationship {
    pub id: String,
    pub following: bool,
    pub showing_reblogs: bool,
    pub notifying: bool,
    /// Null: every language.
    #[schema(value_type = Option<Vec<String>>)]
    pub languages: Option<Vec<String>>,
    pub followed_by: bool,
    pub blocking: bool,
    pub blocked_by: bool,
    pub muting: bool,
    pub muting_notifications: bool,
    pub requested: bool,
    pub requested_by: bool,
    pub domain_blocking: bool,
    pub endorsed: bool,
    pub note: String,
}

impl Relationship {
    pub fn new(id: UserId, rel: &RelationshipRow) -> Self {
        Relationship {
            id: id.to_string(),
            following: rel.following,
            showing_reblogs: rel.following,
            notifying: false,
            languages: None,
            followed_by: rel.followed_by,
            blocking: rel.blocking,
            blocked_by: rel.blocked_by,
            muting: rel.muting,
            muting_notifications: rel.muting,
            requested: false,
            requested_by: false,
            domain_blocking: false,
            endorsed: false,
            note: String::new(),
        }
    }
}

/// The longest post, in characters (as `PostBody` allows).
const MAX_CHARACTERS: u32 = 2000;

/// What Mastodon's `GET /api/v1/instance` answers: enough for a client to
/// start.
pub fn instance_v1(origin: &Origin, version: &str, users: i64) -> serde_json::Value {
    json!({
        "uri": origin.host(),
        "title": "feed-service",
        "short_description": "A home timeline service",
        "description": "A push/pull hybrid home timeline, answering the Mastodon API's timeline subset.",
        "email": "",
        "version": version,
        "urls": {"streaming_api": streaming_url(origin)},
        "stats": {"user_count": users, "status_count": 0, "domain_count": 1},
        "thumbnail": null,
        "languages": ["en"],
        "registrations": false,
        "approval_required": false,
        "invites_enabled": false,
        "configuration": configuration(origin),
        "contact_account": null,
        "rules": [],
    })
}

/// The Mastodon API version the routes served follow (`api_versions`):
/// 2, Mastodon 4.3's, whose mark is grouped notifications (served), so
/// that clients ask for those.
const MASTODON_API_VERSION: u32 = 2;

/// What Mastodon's `GET /api/v2/instance` answers.
pub fn instance_v2(origin: &Origin, version: &str) -> serde_json::Value {
    json!({
        "domain": origin.host(),
        "title": "feed-service",
        "version": version,
        "api_versions": {"mastodon": MASTODON_API_VERSION},
        "source_url": "",
        "description": "A push/pull hybrid home timeline, answering the Mastodon API's timeline subset.",
        "usage": {"users": {"active_month": 0}},
        "thumbnail": {"url": format!("{}/thumbnail.png", origin.0)},
        "languages": ["en"],
        "configuration": configuration(origin),
        "registrations": {"enabled": false, "approval_required": false, "message": null},
        "contact": {"email": "", "account": null},
        "rules": [],
    })
}

fn streaming_url(origin: &Origin) -> String {
    origin
        .0
        .replacen("https://", "wss://", 1)
        .replacen("http://", "ws://", 1)
}

fn configuration(origin: &Origin) -> serde_json::Value {
    json!({
        "urls": {"streaming": streaming_url(origin)},
        "accounts": {"max_featured_tags": 0, "max_pinned_statuses": 0},
        "statuses": {
            "max_characters": MAX_CHARACTERS,
            "max_media_attachments": 0,
            "characters_reserved_per_url": 23,
        },
        "media_attachments": {
            "supported_mime_types": [],
            "image_size_limit": 0,
            "image_matrix_limit": 0,
            "video_size_limit": 0,
            "video_frame_rate_limit": 0,
            "video_matrix_limit": 0,
        },
        "polls": {
            "max_options": 0,
            "max_characters_per_option": 0,
            "min_expiration": 0,
            "max_expiration": 0,
        },
        "translation": {"enabled": false},
        "timelines_access": {
            "live_feeds": {"local": "disabled", "remote": "disabled"},
            "hashtag_feeds": {"local": "disabled", "remote": "disabled"},
            "trending_link_feeds": {"local": "disabled", "remote": "disabled"},
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::feed_order;

    #[test]
    fn status_ids_order_as_the_feed() {
        let entries = [
            Entry::new(5, PostId(9)),
            Entry::new(5, PostId(10)),
            Entry::new(5, PostId(1)),
            Entry::new(5, PostId(100)),
            Entry::new(5, PostId(99)),
            Entry::new(6, PostId(1)),
            Entry::new(4, PostId(i64::MAX)),
            Entry::new(1_764_500_000_123, PostId(123_456_789)),
            Entry::new(1_764_500_000_123, PostId(98)),
        ];
        for a in &entries {
            assert_eq!(parse_status_id(&status_id(*a)), Some(*a));
            for b in &entries {
                let (ia, ib) = (status_id(*a), status_id(*b));
                assert_eq!(ia.len(), 36);
                // Newer (first in the feed) means a greater id.
                assert_eq!(feed_order(a, b), ib.cmp(&ia), "{a:?} {b:?}");
                let (na, nb): (u128, u128) = (ia.parse().unwrap(), ib.parse().unwrap());
                assert_eq!(feed_order(a, b), nb.cmp(&na));
            }
        }
    }

    #[test]
    fn only_ids_of_this_service_parse() {
        for bad in [
            "",
            "12",
            "abc",
            &"1".repeat(37),
            &format!("2{}", "0".repeat(35)),
            &format!("1{}", "0".repeat(35)),
            &format!("1{}{}", "0".repeat(15), "9".repeat(20)),
        ] {
            assert_eq!(parse_status_id(bad), None, "{bad}");
        }
    }

    #[test]
    fn dates_and_content() {
        assert_eq!(iso8601(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(iso8601(1_764_500_000_123), "2025-11-30T10:53:20.123Z");
        assert_eq!(iso8601(951_782_400_000), "2000-02-29T00:00:00.000Z");
        assert_eq!(
            content("a<b> & \"c\""),
            "<p>a&lt;b&gt; &amp; &quot;c&quot;</p>"
        );
        assert_eq!(
            content("one\ntwo\n\nthree"),
            "<p>one<br />two</p><p>three</p>"
        );
    }
}
