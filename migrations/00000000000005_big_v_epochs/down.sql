-- Nothing to undo: an epoch is only a counter of big-V times.
SELECT 1;
