DELETE FROM fanout_jobs WHERE kind = 'follows';
ALTER TABLE fanout_jobs DROP CONSTRAINT fanout_jobs_kind_check;
ALTER TABLE fanout_jobs ADD CONSTRAINT fanout_jobs_kind_check
    CHECK (kind IN ('deliver', 'backfill', 'follow', 'unfollow', 'retract', 'mute', 'unmute',
                    'hide', 'purge', 'import'));
ALTER TABLE fanout_jobs DROP COLUMN targets;
ALTER TABLE settings DROP COLUMN follow_copy_limit;
