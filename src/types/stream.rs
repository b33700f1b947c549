//! How a live stream ends: the `reason` label of
//! `feed_streams_ended_total`.

/// Why the hub ends a stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Closing {
    /// The instance stops (or an operator closes every stream).
    Shutdown,
    /// The reader's account is deleted.
    AccountGone,
    /// The list a stream follows is deleted.
    ListGone,
}

/// Why a stream ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// Its client went away.
    ClientGone,
    /// Its client stopped reading: an event found no room in time.
    Stalled,
    /// The hub closed it.
    Closed(Closing),
    /// Its reader has no home any more (deleted), or its position was
    /// refused.
    Refused,
    /// More deletions and removals waited than a stream keeps.
    Overflowed,
}

impl End {
    pub const ALL: [End; 7] = [
        End::ClientGone,
        End::Stalled,
        End::Closed(Closing::Shutdown),
        End::Closed(Closing::AccountGone),
        End::Closed(Closing::ListGone),
        End::Refused,
        End::Overflowed,
    ];

    /// Its name, as a metric's label.
    pub fn as_str(self) -> &'static str {
        match self {
            End::ClientGone => "client_gone",
            End::Stalled => "stalled",
            End::Closed(Closing::Shutdown) => "shutdown",
            End::Closed(Closing::AccountGone) => "account_gone",
            End::Closed(Closing::ListGone) => "list_gone",
            End::Refused => "refused",
            End::Overflowed => "overflowed",
        }
    }

    /// Whether the service ended it (and so cuts its connection).
    pub fn by_service(self) -> bool {
        self != End::ClientGone
    }
}
