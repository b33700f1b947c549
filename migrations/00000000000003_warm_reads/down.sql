ALTER TABLE fanout_jobs RESET (
    autovacuum_vacuum_scale_factor, autovacuum_vacuum_threshold,
    autovacuum_vacuum_insert_scale_factor, autovacuum_vacuum_insert_threshold,
    autovacuum_analyze_scale_factor, autovacuum_analyze_threshold,
    autovacuum_vacuum_cost_delay
);
DELETE FROM fanout_jobs WHERE kind = 'retract';
ALTER TABLE fanout_jobs DROP CONSTRAINT fanout_jobs_kind_check;
ALTER TABLE fanout_jobs ADD CONSTRAINT fanout_jobs_kind_check
    CHECK (kind IN ('deliver', 'backfill', 'follow', 'unfollow'));
ALTER TABLE fanout_jobs DROP COLUMN epoch;
ALTER TABLE users DROP COLUMN big_v_epoch;
ALTER TABLE users DROP COLUMN follow_seq;
