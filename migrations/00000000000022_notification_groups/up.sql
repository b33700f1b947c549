-- Notifications in groups (Mastodon's grouped notifications): new
-- followers within twelve hours of a group's first hour share its key,
-- `follow-<hour>`, chosen when the notification is written.
ALTER TABLE notifications ADD COLUMN IF NOT EXISTS group_key TEXT;
UPDATE notifications SET group_key = 'follow-' || (created_at_ms / 3600000)
    WHERE group_key IS NULL;
ALTER TABLE notifications ALTER COLUMN group_key SET NOT NULL;
CREATE INDEX IF NOT EXISTS notifications_of_group ON notifications (user_id, group_key, id);
