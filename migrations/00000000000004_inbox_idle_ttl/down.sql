ALTER TABLE settings DROP COLUMN inbox_idle_ttl_secs;
