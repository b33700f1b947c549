-- The authors whose posts a feed shows, and a feed's posts as its rows,
-- each written once for every feed query.

-- With `home`, the authors `usr` follows and has not muted, and `usr`
-- itself where `own` holds; else `usr` alone (an author's page). Only
-- active accounts: a suspended or deleted one's posts are in no feed.
-- One SQL statement, STABLE: the planner inlines it into each query.
CREATE FUNCTION feed_authors(usr bigint, home bool, own bool)
RETURNS TABLE (a bigint)
LANGUAGE sql STABLE
AS $$
    SELECT x.a
    FROM (
        SELECT f.followee_id FROM follows f
        WHERE home AND f.follower_id = usr
          AND NOT EXISTS (SELECT 1 FROM mutes m
                          WHERE m.muter_id = f.follower_id AND m.muted_id = f.followee_id)
        UNION ALL
        SELECT usr WHERE NOT home OR own
    ) x(a)
    JOIN users su ON su.id = x.a
    WHERE su.status = 'active'
$$;

-- A post as a feed shows it: a deleted one keeps its place, but its body
-- and meta are not read.
CREATE VIEW feed_rows AS
SELECT p.id, p.author_id, u.username,
       CASE WHEN p.deleted_at IS NULL THEN p.body ELSE '' END AS body,
       p.created_at_ms,
       p.deleted_at IS NULL AS live,
       CASE WHEN p.deleted_at IS NULL THEN p.meta END AS meta
FROM posts p JOIN users u ON u.id = p.author_id;
