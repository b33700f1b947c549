CREATE INDEX IF NOT EXISTS posts_deleted_by_time ON posts (created_at_ms) WHERE deleted_at IS NOT NULL;
