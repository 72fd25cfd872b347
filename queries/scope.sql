-- name: EnsureScope :exec
-- Idempotent creation. ON DUPLICATE KEY keeps an existing row untouched (its
-- generation and ordinal counter must never be reset by a late writer).
INSERT INTO scope (scope_id, active_generation)
VALUES (sqlc.arg(scope_id), sqlc.arg(active_generation))
ON DUPLICATE KEY UPDATE scope_id = scope_id;

-- name: GetScope :one
-- Primary-key point read.
SELECT scope_id, active_generation, next_enqueue_ordinal, created_at, updated_at
FROM scope
WHERE scope_id = sqlc.arg(scope_id);

-- name: LockScopeForEnqueue :one
-- Current read under a row lock. Enqueue takes this lock first, then writes
-- events, then work items: one lock order for every admission path, and the
-- locking read sees rows committed while it waited (TiDB keeps the snapshot of
-- a transaction's first read otherwise).
SELECT active_generation, next_enqueue_ordinal
FROM scope
WHERE scope_id = sqlc.arg(scope_id)
FOR UPDATE;

-- name: AdvanceEnqueueOrdinal :exec
-- Reserves a block of ordinals [next_enqueue_ordinal, + reserved) for the
-- events of one enqueue batch; called under LockScopeForEnqueue's lock.
UPDATE scope
SET next_enqueue_ordinal = next_enqueue_ordinal + sqlc.arg(reserved),
    updated_at = NOW(6)
WHERE scope_id = sqlc.arg(scope_id);

-- name: TxnMode :one
-- The session's transaction mode. laneq's finish transaction relies on
-- pessimistic READ COMMITTED, which TiDB honors only in pessimistic mode (in
-- optimistic mode it silently runs REPEATABLE READ), so Queue checks it.
SELECT CAST(@@tidb_txn_mode AS CHAR(16)) AS txn_mode;
