-- A feed from a position down (`PostRecords::feed`): the live posts
-- scored exactly the position's score past the first `offset`, then at
-- least `window` live posts below that score, where the feed has them.
-- Deleted posts have left the feed: the index of live posts skips them, so
-- however many lie between live ones the read stays one window.
--
-- Binds, in order: the scope's user, whether the scope is a home, whether
-- that home shows its reader's own posts, the list or NULL (`feed_authors`), the score, the
-- offset, the window. The caller puts the rows in feed order.
WITH v AS (SELECT a FROM feed_authors($1, $2, $3, $4))
SELECT r.id, r.author_id, r.username, r.body, r.created_at_ms, r.live, r.meta
FROM (
    (SELECT p.id
     FROM v JOIN posts p ON p.author_id = v.a
     WHERE p.created_at_ms = $5 AND p.deleted_at IS NULL
     ORDER BY p.id::text COLLATE "C" DESC
     OFFSET $6 LIMIT $7)
    UNION ALL
    (SELECT p.id
     FROM v CROSS JOIN LATERAL (
         SELECT id, created_at_ms FROM posts
         WHERE author_id = v.a AND deleted_at IS NULL AND created_at_ms < $5
         ORDER BY created_at_ms DESC
         FETCH FIRST ($7) ROWS WITH TIES
     ) p
     ORDER BY p.created_at_ms DESC, p.id::text COLLATE "C" DESC
     LIMIT $7)
) e
JOIN feed_rows r ON r.id = e.id
