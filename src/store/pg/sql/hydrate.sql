-- The posts among some ids that belong to a feed, live or deleted
-- (`PostRecords::hydrate`).
--
-- Binds, in order: the scope's user, whether the scope is a home, whether
-- that home shows its reader's own posts, the list or NULL (`feed_authors`), the ids.
SELECT r.id, r.author_id, r.username, r.body, r.created_at_ms, r.live, r.meta
FROM feed_authors($1, $2, $3, $4) v
JOIN feed_rows r ON r.author_id = v.a
WHERE r.id = ANY($5)
