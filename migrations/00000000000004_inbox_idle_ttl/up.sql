-- An inbox (and the reader's copy of whom it follows) expires after this many
-- seconds without a read; it is rebuilt from PostgreSQL when its reader returns.
ALTER TABLE settings ADD COLUMN inbox_idle_ttl_secs BIGINT NOT NULL DEFAULT 2592000
    CHECK (inbox_idle_ttl_secs BETWEEN 3600 AND 31622400);
