-- How many of an author's newest posts a follow copies into the follower's
-- inbox (as Stream's activity_copy_limit); older ones are read through the
-- fallback to PostgreSQL. 0 copies none.
ALTER TABLE settings ADD COLUMN follow_copy_limit BIGINT NOT NULL DEFAULT 100
    CHECK (follow_copy_limit BETWEEN 0 AND 100000);

-- 'follows': many follows of one reader made in one transaction (`targets`,
-- change `epoch` of its sequence), into its Redis state in one call.
ALTER TABLE fanout_jobs ADD COLUMN targets BIGINT[];
ALTER TABLE fanout_jobs DROP CONSTRAINT fanout_jobs_kind_check;
ALTER TABLE fanout_jobs ADD CONSTRAINT fanout_jobs_kind_check
    CHECK (kind IN ('deliver', 'backfill', 'follow', 'unfollow', 'retract', 'mute', 'unmute',
                    'hide', 'purge', 'import', 'follows'));
