-- Records of truth. Redis holds only what can be rebuilt from these tables.

CREATE TABLE users (
    id               BIGSERIAL PRIMARY KEY,
    username         TEXT NOT NULL UNIQUE,
    follower_count   BIGINT NOT NULL DEFAULT 0,
    following_count  BIGINT NOT NULL DEFAULT 0,
    -- Whether this author's posts are pulled from its outbox rather than pushed.
    big_v            BOOLEAN NOT NULL DEFAULT FALSE,
    -- Start (ms) of the current big-V interval; NULL while ordinary.
    big_v_since_ms   BIGINT,
    created_at       TIMESTAMPTZ NOT NULL DEFAULT now()
);

CREATE TABLE follows (
    follower_id  BIGINT NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    followee_id  BIGINT NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    created_at   TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (follower_id, followee_id),
    CHECK (follower_id <> followee_id)
);
-- Fan-out pages through an author's followers by keyset on this index.
CREATE INDEX follows_followee_follower ON follows (followee_id, follower_id);

CREATE TABLE posts (
    id             BIGSERIAL PRIMARY KEY,
    author_id      BIGINT NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    body           TEXT NOT NULL,
    -- The feed score: milliseconds since the Unix epoch.
    created_at_ms  BIGINT NOT NULL,
    deleted_at     TIMESTAMPTZ
);
CREATE INDEX posts_author_created ON posts (author_id, created_at_ms DESC, id DESC);

-- The admin-tunable values: exactly one row.
CREATE TABLE settings (
    id                      SMALLINT PRIMARY KEY DEFAULT 1 CHECK (id = 1),
    big_v_threshold         BIGINT NOT NULL,
    big_v_demote_threshold  BIGINT NOT NULL,
    active_window_secs      BIGINT NOT NULL,
    inbox_max_len           BIGINT NOT NULL,
    outbox_max_len          BIGINT NOT NULL,
    updated_at              TIMESTAMPTZ NOT NULL DEFAULT now(),
    CHECK (big_v_demote_threshold < big_v_threshold)
);
INSERT INTO settings (big_v_threshold, big_v_demote_threshold, active_window_secs, inbox_max_len, outbox_max_len)
VALUES (10000, 8000, 604800, 1000, 1000);

-- Transactional outbox of fan-out work. A row is inserted in the same
-- transaction as the change that needs it and deleted when the work is done.
-- While a 'push' or 'backfill' job of an author exists, readers pull that
-- author's outbox, so a post is visible to every follower from the moment
-- its publish returns, whatever the progress of its fan-out.
CREATE TABLE fanout_jobs (
    id                BIGSERIAL PRIMARY KEY,
    -- 'push': one post to every follower; 'push_active': one post of a big-V
    -- to its active fans; 'backfill': a demoted author's big-V-era posts to
    -- every follower; 'retract': a deleted post out of followers' inboxes;
    -- 'follow' / 'unfollow': an author's recent posts into / out of one
    -- follower's inbox.
    kind              TEXT NOT NULL CHECK (kind IN ('push', 'push_active', 'backfill', 'retract', 'follow', 'unfollow')),
    author_id         BIGINT NOT NULL,
    post_id           BIGINT,
    -- For 'follow' and 'unfollow': the one follower concerned.
    follower_id       BIGINT,
    -- For 'backfill': the start of the big-V interval being settled.
    since_ms          BIGINT,
    -- Keyset checkpoint: the last follower id done.
    checkpoint        BIGINT NOT NULL DEFAULT 0,
    attempts          INTEGER NOT NULL DEFAULT 0,
    lease_until       TIMESTAMPTZ NOT NULL DEFAULT '-infinity',
    last_error        TEXT,
    dead              BOOLEAN NOT NULL DEFAULT FALSE,
    -- When the job was queued (ms): fan-out lag is measured from here.
    created_at_ms     BIGINT NOT NULL
);
CREATE INDEX fanout_jobs_author ON fanout_jobs (author_id);
CREATE INDEX fanout_jobs_ready ON fanout_jobs (lease_until) WHERE NOT dead;
