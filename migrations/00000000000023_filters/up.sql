-- Keyword filters (Mastodon's filters v2): per user, each with the
-- contexts it applies in, its action and an optional expiry; matched when
-- statuses are read, so a change applies to the next read.
CREATE TABLE IF NOT EXISTS filters (
    id            BIGSERIAL PRIMARY KEY,
    user_id       BIGINT NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    title         TEXT NOT NULL,
    contexts      TEXT[] NOT NULL,
    action        TEXT NOT NULL CHECK (action IN ('warn', 'hide', 'blur')),
    expires_at_ms BIGINT,
    created_at_ms BIGINT NOT NULL
);
CREATE INDEX IF NOT EXISTS filters_of_user ON filters (user_id, id);

CREATE TABLE IF NOT EXISTS filter_keywords (
    id         BIGSERIAL PRIMARY KEY,
    filter_id  BIGINT NOT NULL REFERENCES filters (id) ON DELETE CASCADE,
    keyword    TEXT NOT NULL,
    whole_word BOOLEAN NOT NULL
);
CREATE INDEX IF NOT EXISTS filter_keywords_of_filter ON filter_keywords (filter_id, id);
