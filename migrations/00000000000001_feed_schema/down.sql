DROP TABLE fanout_jobs;
DROP TABLE settings;
DROP TABLE posts;
DROP TABLE follows;
DROP TABLE users;
