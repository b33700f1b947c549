//! The hints instances send each other over pub/sub, typed: what each
//! says, which channel carries it and its text are written and read here
//! alone. A hint is best effort (only a hint): what it says can always be
//! read again from the stores.

use super::Keys;
use crate::types::{PostId, UserId};

/// Something that changed, which the open streams of every instance may
/// need to know.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    /// An author published a post (`p:<post>:<score>` on its channel).
    Published {
        author: UserId,
        post: PostId,
        score: i64,
    },
    /// An author's post was deleted (`d:<post>[:<score>]`).
    Deleted {
        author: UserId,
        post: PostId,
        score: Option<i64>,
    },
    /// What a reader's home shows of an author changed (`f`, `u`, `m`,
    /// `b`, with the author, on the reader's channel).
    Shown {
        reader: UserId,
        author: UserId,
        change: ShownChange,
    },
    /// A user has a new notification, of `account`'s act (`n`, with the
    /// account, on the user's channel).
    Notified { user: UserId, account: UserId },
    /// A user's filters changed (`c`, with the user, on its channel).
    FiltersChanged { user: UserId },
    /// A user's lists changed: their members, or a list removed (`l`,
    /// with the user, on its channel).
    ListsChanged { user: UserId },
    /// An account's posts left every feed or came back (`h`, `x`, `s`,
    /// with the account, on the hidden accounts' channel).
    Hidden {
        account: UserId,
        change: HiddenChange,
    },
}

/// How a reader's home changed for one author.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShownChange {
    /// Shown again (a follow, an unmute).
    Followed,
    Unfollowed,
    Muted,
    /// Either of the two blocked the other.
    Blocked,
}

/// Why an account's posts left every feed, or that they are back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HiddenChange {
    Suspended,
    /// The account is being deleted (its own streams end too).
    Deleted,
    Restored,
}

impl ShownChange {
    const CODES: [(ShownChange, &'static str); 4] = [
        (ShownChange::Followed, "f"),
        (ShownChange::Unfollowed, "u"),
        (ShownChange::Muted, "m"),
        (ShownChange::Blocked, "b"),
    ];

    /// Whether the author is shown after the change.
    pub fn shows(self) -> bool {
        self == ShownChange::Followed
    }

    /// Why the author is no longer shown (empty when it is).
    pub fn reason(self) -> &'static str {
        match self {
            ShownChange::Followed => "",
            ShownChange::Unfollowed => "unfollow",
            ShownChange::Muted => "mute",
            ShownChange::Blocked => "block",
        }
    }
}

impl HiddenChange {
    const CODES: [(HiddenChange, &'static str); 3] = [
        (HiddenChange::Suspended, "h"),
        (HiddenChange::Deleted, "x"),
        (HiddenChange::Restored, "s"),
    ];
}

fn code_of<T: PartialEq + Copy>(codes: &[(T, &'static str)], of: T) -> &'static str {
    codes.iter().find(|(c, _)| *c == of).map_or("", |(_, s)| s)
}

fn named<T: Copy>(codes: &[(T, &'static str)], code: &str) -> Option<T> {
    codes.iter().find(|(_, s)| *s == code).map(|(c, _)| *c)
}

impl Signal {
    /// The channel that carries it.
    pub fn channel(&self, keys: &Keys) -> String {
        match *self {
            Signal::Published { author, .. } | Signal::Deleted { author, .. } => {
                keys.author_channel(author)
            }
            Signal::Shown { reader, .. } => keys.reader_channel(reader),
            Signal::Notified { user, .. }
            | Signal::FiltersChanged { user }
            | Signal::ListsChanged { user } => keys.reader_channel(user),
            Signal::Hidden { .. } => keys.hidden_channel(),
        }
    }

    /// Its text on that channel.
    pub fn payload(&self) -> String {
        match *self {
            Signal::Published { post, score, .. } => format!("p:{post}:{score}"),
            Signal::Deleted {
                post,
                score: Some(score),
                ..
            } => format!("d:{post}:{score}"),
            Signal::Deleted { post, .. } => format!("d:{post}"),
            Signal::Shown { author, change, .. } => {
                format!("{}:{author}", code_of(&ShownChange::CODES, change))
            }
            Signal::Notified { account, .. } => format!("n:{account}"),
            Signal::FiltersChanged { user } => format!("c:{user}"),
            Signal::ListsChanged { user } => format!("l:{user}"),
            Signal::Hidden { account, change } => {
                format!("{}:{account}", code_of(&HiddenChange::CODES, change))
            }
        }
    }

    /// The signal a message carries; `None` for a channel or a text this
    /// version does not know (a hint is only a hint).
    pub fn parse(keys: &Keys, channel: &str, payload: &str) -> Option<Signal> {
        let name = channel
            .strip_prefix(keys.prefix())?
            .strip_prefix("hints:")?;
        let (op, rest) = payload.split_once(':')?;
        let mut args = rest.split(':').map(str::parse::<i64>);
        let first = args.next()?.ok()?;
        let second = args.next().transpose().ok()?;
        if name == "{pulled}" {
            let change = named(&HiddenChange::CODES, op)?;
            return Some(Signal::Hidden {
                account: UserId(first),
                change,
            });
        }
        if let Some(reader) = name.strip_prefix("{r").and_then(|r| r.split_once('}')) {
            let reader = UserId(reader.1.parse().ok()?);
            match op {
                "n" => {
                    return Some(Signal::Notified {
                        user: reader,
                        account: UserId(first),
                    })
                }
                "c" => return Some(Signal::FiltersChanged { user: reader }),
                "l" => return Some(Signal::ListsChanged { user: reader }),
                _ => {}
            }
            let change = named(&ShownChange::CODES, op)?;
            return Some(Signal::Shown {
                reader,
                author: UserId(first),
                change,
            });
        }
        let author = author_of(name)?;
        match op {
            "p" => Some(Signal::Published {
                author: UserId(author),
                post: PostId(first),
                score: second?,
            }),
            "d" => Some(Signal::Deleted {
                author: UserId(author),
                post: PostId(first),
                score: second,
            }),
            _ => None,
        }
    }
}

/// The author whose posts `channel` carries, if it is an author's.
pub fn author_of_channel(keys: &Keys, channel: &str) -> Option<i64> {
    author_of(
        channel
            .strip_prefix(keys.prefix())?
            .strip_prefix("hints:")?,
    )
}

fn author_of(name: &str) -> Option<i64> {
    name.strip_prefix('{')?.strip_suffix('}')?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_signal_reads_back_as_it_was_sent() {
        let keys = Keys::new("t:");
        let mut all = vec![
            Signal::Published {
                author: UserId(7),
                post: PostId(12),
                score: 1_700_000_000_123,
            },
            Signal::Deleted {
                author: UserId(7),
                post: PostId(12),
                score: Some(1_700_000_000_123),
            },
            Signal::Deleted {
                author: UserId(7),
                post: PostId(12),
                score: None,
            },
        ];
        for (change, _) in ShownChange::CODES {
            all.push(Signal::Shown {
                reader: UserId(5_000),
                author: UserId(3),
                change,
            });
        }
        all.push(Signal::Notified {
            user: UserId(5_000),
            account: UserId(3),
        });
        all.push(Signal::FiltersChanged {
            user: UserId(5_000),
        });
        all.push(Signal::ListsChanged {
            user: UserId(5_000),
        });
        for (change, _) in HiddenChange::CODES {
            all.push(Signal::Hidden {
                account: UserId(9),
                change,
            });
        }
        for signal in all {
            let channel = signal.channel(&keys);
            assert_eq!(
                Signal::parse(&keys, &channel, &signal.payload()),
                Some(signal),
                "{channel} {}",
                signal.payload()
            );
        }
        assert_eq!(author_of_channel(&keys, "t:hints:{7}"), Some(7));
        assert_eq!(
            author_of_channel(&keys, &keys.reader_channel(UserId(7))),
            None
        );
    }

    #[test]
    fn unknown_or_malformed_messages_are_ignored() {
        let keys = Keys::new("t:");
        for (channel, payload) in [
            ("t:hints:{7}", "z:1"),
            ("t:hints:{7}", "p:1"),
            ("t:hints:{7}", "p:x:1"),
            ("t:hints:{pulled}", "q:1"),
            ("other:hints:{7}", "p:1:2"),
            ("t:hints:{r0}5", "f:"),
            ("t:hints:{7}", "d"),
        ] {
            assert_eq!(Signal::parse(&keys, channel, payload), None, "{payload}");
        }
    }
}
