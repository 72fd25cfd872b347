-- name: EnsureScope :exec
-- Idempotent creation. ON DUPLICATE KEY keeps an existing row untouched (its
-- generation and ordinal counter must never be reset by a late writer).
INSERT INTO scope (scope_id, active_generation, created_at, updated_at)
VALUES (sqlc.arg(scope_id), sqlc.arg(active_generation), NOW(6), NOW(6))
ON DUPLICATE KEY UPDATE scope_id = scope_id;

-- name: GetScope :one
-- Primary-key point read, once per claim turn and per generation probe. It
-- also returns the database's clock: a claim turn bounds every scan by
-- this instant, so scan windows are measured on one clock, never a host's.
-- paused_classes rides along so a pause or resume reaches every claimer on
-- the read it already makes (no statement of its own; see operate.sql).
SELECT scope_id, active_generation, next_enqueue_ordinal, admitted_at,
       paused_classes, CAST(NOW(6) AS DATETIME(6)) AS db_now
FROM scope
WHERE scope_id = sqlc.arg(scope_id);

-- name: LockScopeForEnqueue :one
-- Current read under a row lock. Enqueue takes this lock first, then writes
-- events, then work items: one lock order for every admission path.
SELECT active_generation, next_enqueue_ordinal
FROM scope
WHERE scope_id = sqlc.arg(scope_id)
FOR UPDATE;

-- name: AdvanceEnqueueOrdinal :exec
-- Reserves a block of ordinals [next_enqueue_ordinal, + reserved) for the
-- items of one enqueue batch; called under LockScopeForEnqueue's lock as the
-- batch's last statement. admitted_at records the database time just before
-- the commit: every later enqueue takes the scope lock after this commit, so
-- its items are due no earlier than admitted_at (claimers rely on that; see
-- ClaimCandidates).
UPDATE scope
SET next_enqueue_ordinal = next_enqueue_ordinal + sqlc.arg(reserved),
    admitted_at = NOW(6),
    updated_at = NOW(6)
WHERE scope_id = sqlc.arg(scope_id);

-- name: SetScopeGeneration :execrows
-- Moves the generation fence forward, only forward. Work of older
-- generations stops being claimable at once: every claim CAS compares with
-- active_generation, and a claim CAS already in flight is caught by
-- ClaimedByRef's generation check. The guard is in the statement itself (a
-- primary-key point update, so a current read under the row lock): a late
-- or racing write of a lower generation matches no row instead of reopening
-- that generation's items, lanes and projections, with no read-then-write
-- window. 0 rows means the scope is missing or already at (or past) the
-- generation; SetGeneration tells them apart with GetScope.
UPDATE scope
SET active_generation = sqlc.arg(active_generation),
    updated_at = NOW(6)
WHERE scope_id = sqlc.arg(scope_id)
  AND active_generation < sqlc.arg(active_generation);

-- name: RollbackScopeGeneration :execrows
-- The operator's deliberate override (Queue.RollbackGeneration, `laneq scope
-- set-generation --rollback`): sets the fence to any generation, lower ones
-- included, which makes that generation's live work claimable again. Kept
-- apart from SetScopeGeneration so no ordinary caller can move the fence
-- back. Primary-key point update; 0 rows means the scope is missing.
UPDATE scope
SET active_generation = sqlc.arg(active_generation),
    updated_at = NOW(6)
WHERE scope_id = sqlc.arg(scope_id);

-- name: SessionSettings :one
-- What workqueue.New checks about a session before trusting it: the
-- transaction mode (laneq's finish and enqueue transactions rely on
-- pessimistic READ COMMITTED, which TiDB honors only in pessimistic mode; in
-- optimistic mode it silently runs REPEATABLE READ); the session time zone
-- (every stored time is NOW(6), so it must be UTC on every session), with
-- the server's system zone behind SYSTEM and the measured offset of NOW()
-- from UTC_TIMESTAMP(); the lock-wait timeout (it must end a statement's
-- lock wait before the client gives the statement up, see
-- workqueue.DefaultLockWaitTimeout); and the database clock (scanning it
-- shows whether the driver parses DATETIME into UTC times).
SELECT CAST(@@tidb_txn_mode AS CHAR(16)) AS txn_mode,
       CAST(@@time_zone AS CHAR(64)) AS time_zone,
       CAST(@@system_time_zone AS CHAR(64)) AS system_time_zone,
       CAST(TIMESTAMPDIFF(SECOND, UTC_TIMESTAMP(), NOW()) AS SIGNED) AS utc_offset_seconds,
       CAST(@@innodb_lock_wait_timeout AS SIGNED) AS lock_wait_timeout_seconds,
       CAST(NOW(6) AS DATETIME(6)) AS db_now;

-- name: RewriteScopeUnchanged :execrows
-- Sets a scope row to its own values. workqueue.New runs it inside a
-- rolled-back transaction to check the connection's clientFoundRows setting:
-- every compare-and-swap needs RowsAffected to count matched rows, and
-- without clientFoundRows this statement reports 0.
UPDATE scope
SET updated_at = updated_at
WHERE scope_id = sqlc.arg(scope_id);

-- name: RegisterWorkKind :exec
-- Enqueue records each (queue class, work type) pair of a scope once, in the
-- batch's transaction; a process skips pairs it registered before. Primary
-- key upsert that keeps the first sighting.
INSERT INTO scope_work_kind (scope_id, queue_class, work_type, first_seen_at)
VALUES (sqlc.arg(scope_id), sqlc.arg(queue_class), sqlc.arg(work_type), NOW(6))
ON DUPLICATE KEY UPDATE scope_id = scope_id;

-- name: ListWorkKinds :many
-- The pairs a scope has work of: a primary-key prefix range, as small as the
-- number of distinct pairs. Workers read it at start-up and reconciliation.
SELECT queue_class, work_type
FROM scope_work_kind
WHERE scope_id = sqlc.arg(scope_id)
ORDER BY queue_class, work_type;

-- name: ScopeMarks :many
-- A multi-scope worker's idle probe (worker.Group): for the listed scopes it
-- serves, what moves when work may have become claimable in a scope that
-- had none. Every enqueue and replay advances next_enqueue_ordinal, and a
-- generation move or a pause change rewrites updated_at, all under the
-- scope row's lock; work that is already live (pending, blocked, waiting,
-- processing) keeps its scope's member running, so for a scope with no
-- live work these columns are the only place a change can show. One
-- statement for every idle scope: a batch of primary-key point gets (the
-- caller sends at most 1,000 ids a statement), never a work_item read.
SELECT scope_id, active_generation, next_enqueue_ordinal, updated_at
FROM scope
WHERE scope_id IN (sqlc.slice(scope_ids))
ORDER BY scope_id;

-- name: ScopeMarksInRange :many
-- The same for every scope of a prefix (worker.Group with a Prefix), which
-- also finds scopes created since the last probe: the primary key's range
-- [from_scope_id, before_scope_id), a page of at most LIMIT rows in key
-- order (the caller computes before_scope_id, the prefix's upper bound, and
-- pages on from the last id read).
SELECT scope_id, active_generation, next_enqueue_ordinal, updated_at
FROM scope
WHERE scope_id >= sqlc.arg(from_scope_id)
  AND scope_id < sqlc.arg(before_scope_id)
ORDER BY scope_id
LIMIT ?;
