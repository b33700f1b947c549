DROP TABLE IF EXISTS filter_keywords;
DROP TABLE IF EXISTS filters;
