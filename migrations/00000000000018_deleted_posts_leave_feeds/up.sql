-- Deleted posts leave the feeds: no page counts them any more, so the
-- index that counted those sharing a millisecond goes.
DROP INDEX IF EXISTS posts_deleted_by_time;
