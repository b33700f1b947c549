-- A feed page read from PostgreSQL walks only live posts (however many
-- deleted ones lie between them) and counts the deleted ones that share
-- the millisecond of the page's last item, for the cursor.
CREATE INDEX posts_live_by_author ON posts (author_id, created_at_ms DESC, id DESC)
    WHERE deleted_at IS NULL;
CREATE INDEX posts_deleted_by_time ON posts (created_at_ms) WHERE deleted_at IS NOT NULL;
