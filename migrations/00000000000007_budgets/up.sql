-- Budgets an admin sets: follows per user (a follow beyond answers 422), and
-- the fan-out backlog (pending deliveries) past which publishes answer 503
-- with Retry-After instead of growing the job table without end.
ALTER TABLE settings ADD COLUMN max_follows BIGINT NOT NULL DEFAULT 10000
    CHECK (max_follows BETWEEN 1 AND 1000000);
ALTER TABLE settings ADD COLUMN max_fanout_backlog BIGINT NOT NULL DEFAULT 100000
    CHECK (max_fanout_backlog BETWEEN 1 AND 100000000);
