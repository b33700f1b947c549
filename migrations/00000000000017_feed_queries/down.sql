DROP VIEW feed_rows;
DROP FUNCTION feed_authors(bigint, bool, bool);
