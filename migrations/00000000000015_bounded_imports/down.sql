DROP INDEX tasks_open_imports;
DROP TABLE import_chunks;
