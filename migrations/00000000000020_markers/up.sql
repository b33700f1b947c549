-- Where a user stopped reading a timeline (Mastodon's markers), so that
-- any of its devices resumes there: one row per user and timeline, its
-- version raised by every change. They go with the account.
CREATE TABLE IF NOT EXISTS markers (
    user_id       BIGINT NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    timeline      TEXT NOT NULL CHECK (timeline IN ('home', 'notifications')),
    last_read_id  TEXT NOT NULL,
    version       BIGINT NOT NULL DEFAULT 0,
    updated_at_ms BIGINT NOT NULL,
    PRIMARY KEY (user_id, timeline)
);
