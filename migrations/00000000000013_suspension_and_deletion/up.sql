-- An account is active, suspended by an admin (its posts leave every feed
-- until it is unsuspended) or being deleted (its posts leave every feed at
-- once; a background job removes its follows, posts and keys, then the row).
ALTER TABLE users ADD COLUMN status TEXT NOT NULL DEFAULT 'active'
    CHECK (status IN ('active', 'suspended', 'deleted'));
CREATE INDEX users_not_active ON users (id) WHERE status <> 'active';

-- Work a user or an admin started and can watch: an account's deletion, an
-- import of follows. Kept a week after it ends.
CREATE TABLE tasks (
    id           BIGSERIAL PRIMARY KEY,
    kind         TEXT NOT NULL CHECK (kind IN ('delete_account', 'import_follows')),
    -- The account deleted, or the importer.
    user_id      BIGINT NOT NULL,
    state        TEXT NOT NULL DEFAULT 'pending'
                 CHECK (state IN ('pending', 'running', 'done', 'failed')),
    total        BIGINT NOT NULL DEFAULT 0,
    done         BIGINT NOT NULL DEFAULT 0,
    -- An import's ids not followed (unknown, oneself, blocked, over the cap).
    skipped      BIGINT NOT NULL DEFAULT 0,
    error        TEXT,
    -- An import's list, in the order given.
    targets      BIGINT[],
    created_at   TIMESTAMPTZ NOT NULL DEFAULT now(),
    finished_at  TIMESTAMPTZ
);
CREATE INDEX tasks_finished ON tasks (finished_at) WHERE finished_at IS NOT NULL;

-- 'hide': an account's posts out of every feed, or back (the hidden
-- accounts in Redis follow its status). 'purge': a deleted account's
-- follows, posts and keys, in batches, then its row. 'import': a task's list
-- of follows, a batch at a time.
ALTER TABLE fanout_jobs ADD COLUMN task_id BIGINT;
ALTER TABLE fanout_jobs DROP CONSTRAINT fanout_jobs_kind_check;
ALTER TABLE fanout_jobs ADD CONSTRAINT fanout_jobs_kind_check
    CHECK (kind IN ('deliver', 'backfill', 'follow', 'unfollow', 'retract', 'mute', 'unmute',
                    'hide', 'purge', 'import'));
