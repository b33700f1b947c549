-- Big-Vs of a database older than big_v_epoch (migration 3 added it with
-- default 0) get an epoch of their own, as a promotion would have given
-- them. (The Redis copy of the pulled authors pulls every big-V whatever
-- its epoch; this keeps a later demotion's backfill, which settles the
-- epoch it ended, apart from any earlier big-V time.)
UPDATE users SET big_v_epoch = 1 WHERE big_v AND big_v_epoch = 0;
