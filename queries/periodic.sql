-- Periodic work (runtime/periodic): which ticks of a schedule are due is
-- decided by the database's clock, never a host's.

-- name: DatabaseNowMicros :one
-- The database's clock as Unix microseconds: an absolute instant whatever
-- the session's time zone and the driver's loc. Every process of a scope
-- reads the same clock, so a host whose clock is off by seconds neither
-- enqueues a tick early nor counts one as missed; a tick's identity (its
-- idempotency key) comes from the schedule, not from when it was read. No
-- table is read.
SELECT CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED) AS now_micros;
