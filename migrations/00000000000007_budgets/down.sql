ALTER TABLE settings DROP COLUMN max_fanout_backlog;
ALTER TABLE settings DROP COLUMN max_follows;
