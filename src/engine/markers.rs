//! Where users stopped reading their timelines (Mastodon's markers), kept
//! in PostgreSQL so that every device of a user resumes at one place. The
//! home's marker is a feed position (a status id names its entry), so a
//! page from it (`min_id`) goes on exactly where its reader stopped.

use super::{now_ms, Engine};
use crate::error::{AppError, AppResult};
use crate::store::pg::{MarkerChange, MarkerRow};
use crate::types::UserId;

/// A timeline that has a marker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Timeline {
    Home,
    Notifications,
}

impl Timeline {
    pub const ALL: [Timeline; 2] = [Timeline::Home, Timeline::Notifications];

    pub fn as_str(self) -> &'static str {
        match self {
            Timeline::Home => "home",
            Timeline::Notifications => "notifications",
        }
    }

    /// The timeline of a name.
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|t| t.as_str() == name)
    }
}

/// Users' markers ([`Engine::markers`]).
#[derive(Clone, Copy)]
pub struct Markers<'a>(pub(crate) &'a Engine);

impl Markers<'_> {
    /// `user`'s markers of `timelines`, those it has set.
    pub async fn get(self, user: UserId, timelines: &[Timeline]) -> AppResult<Vec<MarkerRow>> {
        self.0.accounts().active_user(user).await?;
        let names: Vec<&str> = timelines.iter().map(|t| t.as_str()).collect();
        self.0.inner.pg.markers().markers(user, &names).await
    }

    /// Moves `user`'s markers, all or none: each `(timeline, id,
    /// version)` to its id (the same id again changes nothing). A version
    /// given must be the marker's: 409 if another device moved it since,
    /// and nothing is written.
    pub async fn set(
        self,
        user: UserId,
        changes: &[(Timeline, &str, Option<i64>)],
    ) -> AppResult<Vec<MarkerRow>> {
        self.0.accounts().active_user(user).await?;
        let changes: Vec<MarkerChange<'_>> = changes
            .iter()
            .map(|(t, id, version)| (t.as_str(), *id, *version))
            .collect();
        let set = self.0.inner.pg.markers().set(user, &changes, now_ms());
        set.await?.map_err(|held| {
            let asked = changes.iter().find(|c| c.0 == held.timeline);
            AppError::Conflict(format!(
                "the {} marker is at version {}, not {}: read it again",
                held.timeline,
                held.version,
                asked.and_then(|c| c.2).unwrap_or_default()
            ))
        })
    }
}
