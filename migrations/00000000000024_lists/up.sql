-- Lists: a user's named groups of the accounts it follows, each read as a
-- timeline of its members' posts. An exclusive list's members leave its
-- owner's home while they are in it (as a mute does: the inbox keeps
-- their posts, and they come back when the member leaves the list).
CREATE TABLE lists (
    id             BIGSERIAL PRIMARY KEY,
    owner_id       BIGINT NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    title          TEXT NOT NULL,
    replies_policy TEXT NOT NULL DEFAULT 'list'
                   CHECK (replies_policy IN ('followed', 'list', 'none')),
    exclusive      BOOLEAN NOT NULL DEFAULT false,
    created_at_ms  BIGINT NOT NULL
);
CREATE INDEX lists_of_owner ON lists (owner_id, id);

-- A member is an account the owner follows (an unfollow takes it out of
-- every list of the owner). `owner_id` is the list's, kept here so that a
-- home asks by (owner, member) whether an exclusive list holds an author.
CREATE TABLE list_members (
    list_id        BIGINT NOT NULL REFERENCES lists (id) ON DELETE CASCADE,
    member_id      BIGINT NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    owner_id       BIGINT NOT NULL,
    created_at_ms  BIGINT NOT NULL,
    PRIMARY KEY (list_id, member_id)
);
CREATE INDEX list_members_by_owner ON list_members (owner_id, member_id);

-- Whether `reader`'s home leaves out `author`'s posts although it follows
-- the author: muted, or a member of one of the reader's exclusive lists.
CREATE FUNCTION home_hides(reader bigint, author bigint)
RETURNS boolean
LANGUAGE sql STABLE
AS $$
    SELECT EXISTS (SELECT 1 FROM mutes m WHERE m.muter_id = reader AND m.muted_id = author)
        OR EXISTS (SELECT 1 FROM list_members lm JOIN lists l ON l.id = lm.list_id
                   WHERE lm.owner_id = reader AND lm.member_id = author AND l.exclusive)
$$;

-- The authors whose posts a feed shows. With `list`, that list's members
-- (the list of `usr`) but those `usr` mutes; else, with `home`, the
-- authors `usr` follows but those its home hides, and `usr` itself where
-- `own` holds; else `usr` alone (an author's page). Only active accounts:
-- a suspended or deleted one's posts are in no feed.
DROP FUNCTION feed_authors(bigint, bool, bool);
CREATE FUNCTION feed_authors(usr bigint, home bool, own bool, list bigint)
RETURNS TABLE (a bigint)
LANGUAGE sql STABLE
AS $$
    SELECT x.a
    FROM (
        SELECT f.followee_id FROM follows f
        WHERE list IS NULL AND home AND f.follower_id = usr
          AND NOT home_hides(usr, f.followee_id)
        UNION ALL
        SELECT usr WHERE list IS NULL AND (NOT home OR own)
        UNION ALL
        SELECT lm.member_id FROM list_members lm
        WHERE lm.list_id = list AND lm.owner_id = usr
          AND NOT EXISTS (SELECT 1 FROM mutes m
                          WHERE m.muter_id = usr AND m.muted_id = lm.member_id)
    ) x(a)
    JOIN users su ON su.id = x.a
    WHERE su.status = 'active'
$$;
