-- +goose NO TRANSACTION
-- When each rate-limit window ends, as Unix microseconds by the database's
-- clock, and an index on it: a window's row is worthless once the window
-- has passed (grants go only to the database's current window), so one
-- statement per scope (PruneEndedRateWindows) deletes the passed windows
-- of every limit and every key, the index's front, at most a batch at a
-- time. Before this, each budget pruned its own rows, and the rows of a
-- key whose processes stopped first stayed for good.
-- Rows written before this migration have no end: they are given one 30
-- days on, when any window of a limit with a period under 300 days has
-- passed. Rows an older laneq writes during a rolling upgrade have no
-- end: they are left to that laneq's own pruning.

-- +goose Up
ALTER TABLE rate_window ADD COLUMN ends_micros BIGINT NULL;
ALTER TABLE rate_window ADD INDEX idx_rate_window_ends (scope_id, ends_micros);
UPDATE rate_window SET ends_micros = CAST(UNIX_TIMESTAMP(NOW(6) + INTERVAL 30 DAY) * 1000000 AS SIGNED) WHERE ends_micros IS NULL;

-- +goose Down
ALTER TABLE rate_window DROP INDEX idx_rate_window_ends;
ALTER TABLE rate_window DROP COLUMN ends_micros;
