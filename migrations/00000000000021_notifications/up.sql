-- What happened to a user that it is told of (Mastodon's notifications):
-- a new follower. Written with the follow, in its transaction; at most
-- the newest 1,000 per user are kept; they go with either account.
CREATE TABLE IF NOT EXISTS notifications (
    id            BIGSERIAL PRIMARY KEY,
    user_id       BIGINT NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    kind          TEXT NOT NULL CHECK (kind IN ('follow')),
    account_id    BIGINT NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    created_at_ms BIGINT NOT NULL
);
CREATE INDEX IF NOT EXISTS notifications_of_user ON notifications (user_id, id);
CREATE INDEX IF NOT EXISTS notifications_by_account ON notifications (account_id);
