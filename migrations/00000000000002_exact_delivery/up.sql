-- How each post is delivered is recorded with it, under its author's row
-- lock: `pulled` posts were published while the author was big-V (readers
-- pull them from the outbox; a demotion backfills them). No clock decides it.
ALTER TABLE posts ADD COLUMN pulled BOOLEAN NOT NULL DEFAULT FALSE;
-- Posts of today's big-Vs may have been published as big-V: count them as
-- pulled (a later backfill then pushes them, which is harmless if they were
-- pushed already).
UPDATE posts SET pulled = TRUE WHERE author_id IN (SELECT id FROM users WHERE big_v);
ALTER TABLE users DROP COLUMN big_v_since_ms;

-- Job kinds: 'deliver' (one post to its audience: every follower, or a
-- big-V's active fans), 'backfill' (a demoted author's pulled posts to every
-- follower), 'follow' / 'unfollow' (an author's recent posts into / out of
-- one follower's inbox). Deleted posts keep their place in feeds (the cursor
-- counts them; reads hide them), so nothing is retracted from inboxes.
DELETE FROM fanout_jobs WHERE kind = 'retract';
UPDATE fanout_jobs SET kind = 'deliver' WHERE kind IN ('push', 'push_active');
ALTER TABLE fanout_jobs DROP CONSTRAINT fanout_jobs_kind_check;
ALTER TABLE fanout_jobs ADD CONSTRAINT fanout_jobs_kind_check
    CHECK (kind IN ('deliver', 'backfill', 'follow', 'unfollow'));
ALTER TABLE fanout_jobs DROP COLUMN since_ms;
-- The holder of a job's lease: progress is recorded only with it.
ALTER TABLE fanout_jobs ADD COLUMN lease BIGINT NOT NULL DEFAULT 0;
-- The jobs of one (author, follower) pair run one at a time, in order.
CREATE INDEX fanout_jobs_pair ON fanout_jobs (author_id, follower_id, id)
    WHERE follower_id IS NOT NULL;
