ALTER TABLE fanout_jobs DROP COLUMN instance;
DROP TABLE instances;
