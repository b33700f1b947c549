-- Each account's live posts, kept by the records themselves (triggers on
-- posts, whichever binary writes them, one update per author and
-- statement): a profile reads one column instead of counting every post of
-- its author.
ALTER TABLE users ADD COLUMN post_count BIGINT NOT NULL DEFAULT 0;
UPDATE users u SET post_count = c.n
    FROM (SELECT author_id, count(*) AS n FROM posts WHERE deleted_at IS NULL GROUP BY author_id) c
    WHERE c.author_id = u.id;

CREATE FUNCTION count_posts_in() RETURNS trigger AS $$
BEGIN
    UPDATE users u SET post_count = u.post_count + c.n
        FROM (SELECT author_id, count(*) AS n FROM new_posts
              WHERE deleted_at IS NULL GROUP BY author_id) c
        WHERE u.id = c.author_id;
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;

CREATE FUNCTION count_posts_out() RETURNS trigger AS $$
BEGIN
    UPDATE users u SET post_count = u.post_count - c.n
        FROM (SELECT author_id, count(*) AS n FROM old_posts
              WHERE deleted_at IS NULL GROUP BY author_id) c
        WHERE u.id = c.author_id;
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;

CREATE FUNCTION count_posts_changed() RETURNS trigger AS $$
BEGIN
    UPDATE users u SET post_count = u.post_count + c.n
        FROM (SELECT n.author_id,
                     sum((n.deleted_at IS NULL)::int - (o.deleted_at IS NULL)::int) AS n
              FROM old_posts o JOIN new_posts n USING (id) GROUP BY n.author_id) c
        WHERE u.id = c.author_id AND c.n <> 0;
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;

CREATE TRIGGER posts_counted_in AFTER INSERT ON posts
    REFERENCING NEW TABLE AS new_posts
    FOR EACH STATEMENT EXECUTE FUNCTION count_posts_in();
CREATE TRIGGER posts_counted_out AFTER DELETE ON posts
    REFERENCING OLD TABLE AS old_posts
    FOR EACH STATEMENT EXECUTE FUNCTION count_posts_out();
CREATE TRIGGER posts_counted_changed AFTER UPDATE ON posts
    REFERENCING OLD TABLE AS old_posts NEW TABLE AS new_posts
    FOR EACH STATEMENT EXECUTE FUNCTION count_posts_changed();
