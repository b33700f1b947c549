-- A reader's home feed shows its own posts too (as social apps do), unless
-- an admin turns it off. Either way a post is pushed into its author's own
-- inbox as into its followers': turning the setting on or off changes only
-- what reads show, at once, with nothing to rebuild.
ALTER TABLE settings ADD COLUMN home_includes_own_posts BOOLEAN NOT NULL DEFAULT TRUE;
