-- A post and its `deliver` job, in one statement (`PostRecords::publish`),
-- under the author's row lock; nothing if the author is not active. With a
-- publish key, the key is recorded and the post's id comes from the key's
-- row: if the author holds the key already, there is no key row and no
-- post. The post records whether it is pulled (its author is big-V) or
-- pushed.
--
-- Binds, in order: the author, the key (or NULL), the body, the meta (or
-- NULL), the post's time, the job's kind, now.
WITH a AS (
    SELECT id, username, big_v FROM users
    WHERE status = 'active' AND id = $1
    FOR UPDATE
),
k AS (
    INSERT INTO publish_keys (author_id, key, post_id)
    SELECT id, $2, nextval('posts_id_seq') FROM a WHERE $2 IS NOT NULL
    ON CONFLICT DO NOTHING
    RETURNING post_id
),
n AS (
    SELECT post_id AS id FROM k
    UNION ALL
    SELECT nextval('posts_id_seq') FROM a WHERE $2 IS NULL
),
p AS (
    INSERT INTO posts (id, author_id, body, meta, created_at_ms, pulled)
    SELECT n.id, a.id, $3, $4, $5, a.big_v FROM a, n
    RETURNING id, author_id, body, meta, created_at_ms
),
j AS (
    INSERT INTO fanout_jobs (kind, author_id, post_id, created_at_ms)
    SELECT $6, p.author_id, p.id, $7 FROM p
)
SELECT p.id, p.author_id, a.username, p.body, p.created_at_ms, p.meta FROM p, a
