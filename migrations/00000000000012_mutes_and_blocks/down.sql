DELETE FROM fanout_jobs WHERE kind IN ('mute', 'unmute');
ALTER TABLE fanout_jobs DROP CONSTRAINT fanout_jobs_kind_check;
ALTER TABLE fanout_jobs ADD CONSTRAINT fanout_jobs_kind_check
    CHECK (kind IN ('deliver', 'backfill', 'follow', 'unfollow', 'retract'));
DROP TABLE blocks;
DROP TABLE mutes;
