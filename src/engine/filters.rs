//! Users' keyword filters (Mastodon's filters v2), kept in PostgreSQL and
//! matched when statuses are read: a change applies to the next read, and
//! the user's open streams are told of it.
//! A keyword matches a post's text ignoring case, as a whole word (not
//! inside a longer word) when the keyword asks for it.

use super::{now_ms, Engine};
use crate::error::{AppError, AppResult};
use crate::store::pg::{FilterFields, FilterWithKeywords, KeywordOp, Refused};
use crate::store::redis::hints::Signal;
use crate::types::UserId;

/// The contexts a filter may apply in.
pub const CONTEXTS: [&str; 5] = ["home", "notifications", "public", "thread", "account"];

/// What a filter does with a status it matches.
pub const ACTIONS: [&str; 3] = ["warn", "hide", "blur"];

/// Filters a user keeps at most.
pub const MAX_FILTERS: i64 = 100;

/// Keywords a filter holds at most.
pub const MAX_KEYWORDS: i64 = 100;

/// A title's and a keyword's characters at most.
pub const MAX_TITLE_CHARS: usize = 256;
pub const MAX_KEYWORD_CHARS: usize = 100;

/// How far ahead a filter may expire: ten years.
const MAX_EXPIRES_IN_SECS: i64 = 10 * 365 * 24 * 3600;

/// A filter's match of a status: the filter and the keywords found.
pub type Matched<'f> = (&'f FilterWithKeywords, Vec<String>);

/// Users' filters ([`Engine::filters`]).
#[derive(Clone, Copy)]
pub struct Filters<'a>(pub(crate) &'a Engine);

/// A filter's fields as a client sends them, checked.
#[derive(Debug, Clone, Default)]
pub struct FilterInput {
    pub title: Option<String>,
    pub contexts: Option<Vec<String>>,
    pub action: Option<String>,
    /// Seconds from now; `Some(None)`: never.
    pub expires_in: Option<Option<i64>>,
}

impl FilterInput {
    /// Its fields, checked (400 for one out of bounds).
    fn fields(&self, now_ms: i64) -> AppResult<FilterFields> {
        if let Some(title) = &self.title {
            text("title", title, MAX_TITLE_CHARS)?;
        }
        if let Some(contexts) = &self.contexts {
            if contexts.is_empty() {
                return Err(bad("context must name at least one context"));
            }
            if let Some(c) = contexts.iter().find(|c| !CONTEXTS.contains(&c.as_str())) {
                return Err(bad(&format!(
                    "{c:?} is not a context (one of {})",
                    CONTEXTS.join(", ")
                )));
            }
        }
        if let Some(a) = &self.action {
            if !ACTIONS.contains(&a.as_str()) {
                return Err(bad(&format!(
                    "filter_action must be warn, hide or blur, got {a:?}"
                )));
            }
        }
        let expires_at_ms = match self.expires_in {
            None => None,
            Some(None) => Some(None),
            Some(Some(secs)) if (1..=MAX_EXPIRES_IN_SECS).contains(&secs) => {
                Some(Some(now_ms + secs * 1000))
            }
            Some(Some(secs)) => {
                return Err(bad(&format!(
                    "expires_in must be 1 to {MAX_EXPIRES_IN_SECS} seconds, got {secs}"
                )))
            }
        };
        let mut contexts = self.contexts.clone();
        if let Some(c) = contexts.as_mut() {
            c.sort();
            c.dedup();
        }
        Ok(FilterFields {
            title: self.title.clone(),
            contexts,
            action: self.action.clone(),
            expires_at_ms,
        })
    }
}

pub(super) fn bad(message: &str) -> AppError {
    AppError::BadRequest(message.to_string())
}

/// A text field: 1 to `most` characters, no NUL.
pub(super) fn text(name: &str, value: &str, most: usize) -> AppResult<()> {
    let chars = value.chars().count();
    if value.trim().is_empty() || chars > most || value.contains('\0') {
        return Err(bad(&format!(
            "{name} must be 1 to {most} characters without NUL, got {chars}"
        )));
    }
    Ok(())
}

/// Checks the keywords a change writes.
fn check_keywords(ops: &[KeywordOp]) -> AppResult<()> {
    for op in ops {
        match op {
            KeywordOp::Add { keyword, .. }
            | KeywordOp::Change {
                keyword: Some(keyword),
                ..
            } => text("keyword", keyword, MAX_KEYWORD_CHARS)?,
            _ => {}
        }
    }
    if ops.len() as i64 > MAX_KEYWORDS * 2 {
        return Err(bad(&format!(
            "one change names at most {} keywords",
            MAX_KEYWORDS * 2
        )));
    }
    Ok(())
}

fn missing(id: i64) -> AppError {
    AppError::NotFound(format!("filter {id} does not exist"))
}

impl Filters<'_> {
    /// `user`'s filters, oldest first.
    pub async fn all(self, user: UserId) -> AppResult<Vec<FilterWithKeywords>> {
        self.0.accounts().active_user(user).await?;
        self.0.inner.pg.filters().all(user).await
    }

    /// One of `user`'s filters (404 if it has none of that id).
    pub async fn one(self, user: UserId, id: i64) -> AppResult<FilterWithKeywords> {
        self.0.accounts().active_user(user).await?;
        let found = self.0.inner.pg.filters().one(user, id).await?;
        found.ok_or_else(|| missing(id))
    }

    /// A new filter (title, contexts and action required): 422 past
    /// [`MAX_FILTERS`] or [`MAX_KEYWORDS`].
    pub async fn create(
        self,
        user: UserId,
        input: &FilterInput,
        keywords: &[KeywordOp],
    ) -> AppResult<FilterWithKeywords> {
        if input.title.is_none() || input.contexts.is_none() {
            return Err(bad("a filter needs a title and a context"));
        }
        let now = now_ms();
        let mut fields = input.fields(now)?;
        fields.action.get_or_insert_with(|| "warn".into());
        check_keywords(keywords)?;
        self.0.accounts().active_user(user).await?;
        let caps = (MAX_FILTERS, MAX_KEYWORDS);
        let made = self
            .0
            .inner
            .pg
            .filters()
            .create(user, &fields, keywords, caps, now)
            .await?;
        match made {
            Ok(id) => {
                self.changed(user).await;
                self.one(user, id).await
            }
            Err(_) => Err(AppError::Unprocessable(format!(
                "a user keeps at most {MAX_FILTERS} filters"
            ))),
        }
    }

    /// Changes one of `user`'s filters (404 if it has none of that id):
    /// the fields given, then its keywords.
    pub async fn update(
        self,
        user: UserId,
        id: i64,
        input: &FilterInput,
        keywords: &[KeywordOp],
    ) -> AppResult<FilterWithKeywords> {
        let fields = input.fields(now_ms())?;
        check_keywords(keywords)?;
        self.0.accounts().active_user(user).await?;
        let records = self.0.inner.pg.filters();
        match records
            .update(user, id, &fields, keywords, MAX_KEYWORDS)
            .await?
        {
            Ok(()) => {
                self.changed(user).await;
                self.one(user, id).await
            }
            Err(Refused::Missing | Refused::Full) => Err(missing(id)),
        }
    }

    /// Removes one of `user`'s filters (404 if it has none of that id).
    pub async fn delete(self, user: UserId, id: i64) -> AppResult<()> {
        self.0.accounts().active_user(user).await?;
        match self.0.inner.pg.filters().delete(user, id).await? {
            true => {
                self.changed(user).await;
                Ok(())
            }
            false => Err(missing(id)),
        }
    }

    /// Tells every instance's streams of `user` that its filters changed.
    async fn changed(self, user: UserId) {
        self.0.hint(Signal::FiltersChanged { user }).await;
    }

    /// The filter of one of `user`'s keywords (404 if it has none of that
    /// id).
    pub async fn filter_of_keyword(self, user: UserId, keyword: i64) -> AppResult<i64> {
        let found = self
            .0
            .inner
            .pg
            .filters()
            .filter_of_keyword(user, keyword)
            .await?;
        found.ok_or_else(|| AppError::NotFound(format!("filter keyword {keyword} does not exist")))
    }

    /// `user`'s filters that apply in `context` (expired ones too:
    /// [`matches()`] leaves those out when it matches, so a stream that
    /// holds its filters sees them expire).
    pub async fn applying(self, user: UserId, context: &str) -> AppResult<Vec<FilterWithKeywords>> {
        let all = self.0.inner.pg.filters().all(user).await?;
        Ok(all
            .into_iter()
            .filter(|(f, _)| f.contexts.iter().any(|c| c == context))
            .collect())
    }
}

/// The filters of `filters` that match `text` (those not expired), each
/// with the keywords found in it.
pub fn matches<'f>(filters: &'f [FilterWithKeywords], text: &str) -> Vec<Matched<'f>> {
    let lower = text.to_lowercase();
    let now = now_ms();
    filters
        .iter()
        .filter(|(f, _)| f.expires_at_ms.is_none_or(|at| at > now))
        .filter_map(|filter| {
            let found: Vec<String> = filter
                .1
                .iter()
                .filter(|k| contains(&lower, &k.keyword.to_lowercase(), k.whole_word))
                .map(|k| k.keyword.clone())
                .collect();
            (!found.is_empty()).then_some((filter, found))
        })
        .collect()
}

/// Whether `text` holds `keyword` (both in lower case), with `whole_word`
/// not inside a longer word: the characters around it, where the keyword
/// begins or ends with a letter or digit, are none.
fn contains(text: &str, keyword: &str, whole_word: bool) -> bool {
    if keyword.is_empty() {
        return false;
    }
    let wordy = |c: char| c.is_alphanumeric() || c == '_';
    let starts_wordy = keyword.chars().next().is_some_and(wordy);
    let ends_wordy = keyword.chars().next_back().is_some_and(wordy);
    text.match_indices(keyword).any(|(at, _)| {
        if !whole_word {
            return true;
        }
        let before = text[..at].chars().next_back();
        let after = text[at + keyword.len()..].chars().next();
        let joined_before = starts_wordy && before.is_some_and(wordy);
        let joined_after = ends_wordy && after.is_some_and(wordy);
        !(joined_before || joined_after)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whole_words_are_not_found_inside_longer_words() {
        assert!(contains("i love rust.", "rust", true));
        assert!(!contains("trusty tools", "rust", true));
        assert!(contains("trusty tools", "rust", false));
        assert!(contains("rust", "rust", true));
        assert!(contains("(rust)", "rust", true));
        assert!(!contains("rust_lang", "rust", true));
        assert!(contains("über alles", "über", true));
        assert!(!contains("grüber", "über", true));
        assert!(contains("see #rust!", "#rust", true));
        assert!(contains("a two word phrase here", "word phrase", true));
        assert!(!contains("anything", "", false));
    }
}
