-- name: LoadWarningCount :one
-- The warnings of the statement before it in this session. A LOAD DATA
-- (queries/load) reports a skipped duplicate key, a truncated value or an
-- invalid character as a warning where an INSERT fails: the materializer
-- reads this after each load and fails closed on any.
SELECT CAST(@@warning_count AS SIGNED) AS warnings;
