DROP TABLE publish_keys;
ALTER TABLE posts DROP COLUMN meta;
