ALTER TABLE settings DROP COLUMN home_includes_own_posts;
