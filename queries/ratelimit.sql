-- Rate limits across processes (runtime/ratelimit): a window's budget is
-- shared out by these statements, in one READ COMMITTED transaction per
-- share (EnsureRateWindow, LockRateWindow, GrantRateShare), taken only
-- when a process's own share of the window ran out: claims never write
-- here one by one.

-- name: EnsureRateWindow :exec
-- Creates the window's row with nothing granted and the window's end (for
-- PruneEndedRateWindows); an existing row is left alone (the primary-key
-- duplicate check is a point lookup).
INSERT IGNORE INTO rate_window (scope_id, limit_name, window_index, granted, ends_micros)
VALUES (sqlc.arg(scope_id), sqlc.arg(limit_name), sqlc.arg(window_index), 0, sqlc.arg(ends_micros));

-- name: LockRateWindow :one
-- The window's granted count under its row lock (a primary-key point
-- get), and the database's clock as Unix microseconds: the taker checks
-- that the window is still the current one, and corrects its estimate of
-- the database's clock. Takers of one window wait here for each other;
-- nothing else locks the row.
SELECT granted, CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED) AS now_micros
FROM rate_window
WHERE scope_id = sqlc.arg(scope_id)
  AND limit_name = sqlc.arg(limit_name)
  AND window_index = sqlc.arg(window_index)
FOR UPDATE;

-- name: GrantRateShare :execrows
-- Adds the share the taker computed under LockRateWindow's lock: a
-- primary-key point update.
UPDATE rate_window
SET granted = granted + sqlc.arg(share)
WHERE scope_id = sqlc.arg(scope_id)
  AND limit_name = sqlc.arg(limit_name)
  AND window_index = sqlc.arg(window_index);

-- name: PruneEndedRateWindows :execrows
-- Deletes the scope's windows that ended more than kept_micros ago by the
-- database's clock, of every limit and key, at most LIMIT of them: the
-- front of the scope's range of idx_rate_window_ends, in its order (so no
-- plan reads the scope's primary-key range instead). A passed window is
-- worthless to grants (they go only to the current one); kept_micros (at
-- least a second) keeps the row of a window a taker whose clock estimate
-- lags is still checking, and recent windows for whoever reads them.
-- Rows with no end (written before migration 00026) are not in the range.
DELETE FROM rate_window
WHERE scope_id = sqlc.arg(scope_id)
  AND ends_micros < CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED) - CAST(sqlc.arg(kept_micros) AS SIGNED)
ORDER BY ends_micros
LIMIT 1000;
