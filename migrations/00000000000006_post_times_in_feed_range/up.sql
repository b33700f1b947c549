-- A feed entry in Redis holds a post's time from 2020-01-01T00:00:00Z for
-- 2^40 ms (to November 2054): src/store/redis/layout.rs. The service only
-- ever stamps posts with its clock and refuses a time outside that span;
-- this holds the records to it too, so that every post can be packed into
-- an entry when a feed is rebuilt. (It scans the posts once: a database
-- holding a post stamped outside the span stops the upgrade, naming this
-- constraint, rather than serve it at a wrong place.)
ALTER TABLE posts ADD CONSTRAINT posts_created_at_in_feed_range
    CHECK (created_at_ms >= 1577836800000 AND created_at_ms < 1577836800000 + 1099511627776);
