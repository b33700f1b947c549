DELETE FROM fanout_jobs WHERE kind IN ('hide', 'purge', 'import');
ALTER TABLE fanout_jobs DROP CONSTRAINT fanout_jobs_kind_check;
ALTER TABLE fanout_jobs ADD CONSTRAINT fanout_jobs_kind_check
    CHECK (kind IN ('deliver', 'backfill', 'follow', 'unfollow', 'retract', 'mute', 'unmute'));
ALTER TABLE fanout_jobs DROP COLUMN task_id;
DROP TABLE tasks;
DROP INDEX users_not_active;
ALTER TABLE users DROP COLUMN status;
