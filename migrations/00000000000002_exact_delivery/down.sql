DROP INDEX fanout_jobs_pair;
ALTER TABLE fanout_jobs DROP COLUMN lease;
ALTER TABLE fanout_jobs ADD COLUMN since_ms BIGINT;
ALTER TABLE fanout_jobs DROP CONSTRAINT fanout_jobs_kind_check;
UPDATE fanout_jobs SET kind = 'push' WHERE kind = 'deliver';
ALTER TABLE fanout_jobs ADD CONSTRAINT fanout_jobs_kind_check
    CHECK (kind IN ('push', 'push_active', 'backfill', 'retract', 'follow', 'unfollow'));
ALTER TABLE users ADD COLUMN big_v_since_ms BIGINT;
UPDATE users SET big_v_since_ms = 0 WHERE big_v;
ALTER TABLE posts DROP COLUMN pulled;
