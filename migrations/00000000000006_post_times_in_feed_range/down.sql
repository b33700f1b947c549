ALTER TABLE posts DROP CONSTRAINT posts_created_at_in_feed_range;
