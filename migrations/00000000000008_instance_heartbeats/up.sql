-- Each running instance says it is alive a few times a second; a job's
-- lease names the instance holding it. A job whose instance has gone quiet
-- is taken over at once, without waiting for its lease to run out.
CREATE TABLE instances (
    id       BIGINT PRIMARY KEY,
    seen_at  TIMESTAMPTZ NOT NULL
);
ALTER TABLE fanout_jobs ADD COLUMN instance BIGINT;
