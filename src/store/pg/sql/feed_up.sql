-- A feed from the run of a score up (`PostRecords::feed_up`): every live
-- post scored exactly that, then at least `window` live posts above it
-- where the feed has them (deleted posts have left the feed).
--
-- Binds, in order: the scope's user, whether the scope is a home, whether
-- that home shows its reader's own posts, the list or NULL (`feed_authors`), the score, the
-- window. The caller puts the rows in feed order.
WITH v AS (SELECT a FROM feed_authors($1, $2, $3, $4))
SELECT r.id, r.author_id, r.username, r.body, r.created_at_ms, r.live, r.meta
FROM (
    (SELECT p.id
     FROM v JOIN posts p ON p.author_id = v.a
     WHERE p.created_at_ms = $5 AND p.deleted_at IS NULL)
    UNION ALL
    (SELECT p.id
     FROM v CROSS JOIN LATERAL (
         SELECT id, created_at_ms FROM posts
         WHERE author_id = v.a AND deleted_at IS NULL AND created_at_ms > $5
         ORDER BY created_at_ms ASC
         FETCH FIRST ($6) ROWS WITH TIES
     ) p
     ORDER BY p.created_at_ms ASC, p.id::text COLLATE "C" ASC
     LIMIT $6)
) e
JOIN feed_rows r ON r.id = e.id
