-- Rate limits across processes (runtime/ratelimit): a window's budget is
-- shared out by these statements, in one READ COMMITTED transaction per
-- share (EnsureRateWindow, LockRateWindow, GrantRateShare), taken only
-- when a process's own share of the window ran out: claims never write
-- here one by one.

-- name: EnsureRateWindow :exec
-- Creates the window's row with nothing granted; an existing row is left
-- alone (the primary-key duplicate check is a point lookup).
INSERT IGNORE INTO rate_window (scope_id, limit_name, window_index, granted)
VALUES (sqlc.arg(scope_id), sqlc.arg(limit_name), sqlc.arg(window_index), 0);

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

-- name: PruneRateWindows :execrows
-- Deletes a limit's windows before before_index, at most LIMIT of them: a
-- primary-key range of the limit's oldest rows, which takers run now and
-- then (a window row is worthless once it has passed).
DELETE FROM rate_window
WHERE scope_id = sqlc.arg(scope_id)
  AND limit_name = sqlc.arg(limit_name)
  AND window_index < sqlc.arg(before_index)
LIMIT 1000;
