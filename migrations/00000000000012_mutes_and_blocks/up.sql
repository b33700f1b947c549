-- A reader mutes an author: the author's posts leave the reader's home
-- (follows are kept, and so are the inbox's entries: an unmute brings them
-- back). Listed newest first.
CREATE TABLE mutes (
    muter_id       BIGINT NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    muted_id       BIGINT NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    created_at_ms  BIGINT NOT NULL,
    PRIMARY KEY (muter_id, muted_id),
    CHECK (muter_id <> muted_id)
);
CREATE INDEX mutes_by_time ON mutes (muter_id, created_at_ms DESC);

-- A user blocks another: the follows between them go, either way, and no
-- new one is made while the block stands; neither sees the other's posts.
CREATE TABLE blocks (
    blocker_id     BIGINT NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    blocked_id     BIGINT NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    created_at_ms  BIGINT NOT NULL,
    PRIMARY KEY (blocker_id, blocked_id),
    CHECK (blocker_id <> blocked_id)
);
CREATE INDEX blocks_by_time ON blocks (blocker_id, created_at_ms DESC);
CREATE INDEX blocks_blocked ON blocks (blocked_id, blocker_id);

-- 'mute' / 'unmute': whether an author's posts show in one reader's home,
-- into that reader's copy of whom it follows (when the call could not).
ALTER TABLE fanout_jobs DROP CONSTRAINT fanout_jobs_kind_check;
ALTER TABLE fanout_jobs ADD CONSTRAINT fanout_jobs_kind_check
    CHECK (kind IN ('deliver', 'backfill', 'follow', 'unfollow', 'retract', 'mute', 'unmute'));
