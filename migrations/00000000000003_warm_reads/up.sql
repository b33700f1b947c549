-- Every follow and unfollow of a user bumps its follow_seq (under its row
-- lock): the Redis copy of whom it follows applies changes in this order,
-- whatever order they reach Redis in.
ALTER TABLE users ADD COLUMN follow_seq BIGINT NOT NULL DEFAULT 0;
-- Every promotion and demotion bumps big_v_epoch: the Redis set of pulled
-- authors forgets a demoted author only for the epoch the demotion ended.
ALTER TABLE users ADD COLUMN big_v_epoch BIGINT NOT NULL DEFAULT 0;
-- For a 'backfill': the epoch of the big-V time it settles. For 'follow' and
-- 'unfollow': the follower's follow_seq of the change.
ALTER TABLE fanout_jobs ADD COLUMN epoch BIGINT;
-- 'retract': a deleted post's tombstone into Redis (when the delete itself
-- could not write it).
ALTER TABLE fanout_jobs DROP CONSTRAINT fanout_jobs_kind_check;
ALTER TABLE fanout_jobs ADD CONSTRAINT fanout_jobs_kind_check
    CHECK (kind IN ('deliver', 'backfill', 'follow', 'unfollow', 'retract'));
-- Jobs are inserted and deleted at the publish rate: vacuum the table by a
-- fixed number of dead rows, not a fraction of its (small) size, and without
-- cost delay, so that it stays small under sustained publishing.
ALTER TABLE fanout_jobs SET (
    autovacuum_vacuum_scale_factor = 0,
    autovacuum_vacuum_threshold = 2000,
    autovacuum_vacuum_insert_scale_factor = 0,
    autovacuum_vacuum_insert_threshold = 2000,
    autovacuum_analyze_scale_factor = 0,
    autovacuum_analyze_threshold = 2000,
    autovacuum_vacuum_cost_delay = 0
);
