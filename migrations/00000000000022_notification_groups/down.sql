DROP INDEX IF EXISTS notifications_of_group;
ALTER TABLE notifications DROP COLUMN IF EXISTS group_key;
