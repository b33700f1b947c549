-- Accounts found by the start of their username (Mastodon's search):
-- usernames in byte order whatever the database's collation, so that a
-- prefix is one range of the index and its exact match comes first.
CREATE INDEX IF NOT EXISTS users_active_by_username_bytes
    ON users (username text_pattern_ops) WHERE status = 'active';
