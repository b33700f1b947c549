-- An import's list in chunks of 1,000 ids, one row per batch: a batch
-- reads its own chunk, not the whole list. The chunks go when the import
-- ends (or its importer is deleted).
CREATE TABLE import_chunks (
    task_id  BIGINT NOT NULL REFERENCES tasks (id) ON DELETE CASCADE,
    n        BIGINT NOT NULL,
    ids      BIGINT[] NOT NULL,
    PRIMARY KEY (task_id, n)
);
-- Each user's imports not yet ended: what the per-user cap counts.
CREATE INDEX tasks_open_imports ON tasks (user_id)
    WHERE kind = 'import_follows' AND finished_at IS NULL;
-- An import not yet ended moves its list into chunks (its `targets` stay
-- for a binary of the release before, amid a rolling upgrade); an ended
-- one keeps no list.
INSERT INTO import_chunks (task_id, n, ids)
    SELECT t.id, g, t.targets[g * 1000 + 1 : g * 1000 + 1000]
    FROM tasks t, generate_series(0, (cardinality(t.targets) - 1) / 1000) g
    WHERE t.targets IS NOT NULL AND t.finished_at IS NULL AND cardinality(t.targets) > 0;
UPDATE tasks SET targets = NULL WHERE targets IS NOT NULL AND finished_at IS NOT NULL;
