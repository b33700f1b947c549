DROP INDEX IF EXISTS users_active_by_username_bytes;
