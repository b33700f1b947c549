DROP INDEX posts_deleted_by_time;
DROP INDEX posts_live_by_author;
