-- An app's own JSON object on a post (compact text, at most 4 KiB).
ALTER TABLE posts ADD COLUMN meta TEXT;

-- A client's key for one publish: a retry with the same key (within a day)
-- answers the first post instead of making a second one.
CREATE TABLE publish_keys (
    author_id   BIGINT NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    key         TEXT NOT NULL,
    post_id     BIGINT NOT NULL,
    created_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (author_id, key)
);
CREATE INDEX publish_keys_created ON publish_keys (created_at);
