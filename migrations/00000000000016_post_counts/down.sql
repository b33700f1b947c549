DROP TRIGGER posts_counted_changed ON posts;
DROP TRIGGER posts_counted_out ON posts;
DROP TRIGGER posts_counted_in ON posts;
DROP FUNCTION count_posts_changed();
DROP FUNCTION count_posts_out();
DROP FUNCTION count_posts_in();
ALTER TABLE users DROP COLUMN post_count;
