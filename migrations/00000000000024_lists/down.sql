DROP FUNCTION feed_authors(bigint, bool, bool, bigint);
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
DROP FUNCTION home_hides(bigint, bigint);
DROP TABLE list_members;
DROP TABLE lists;
