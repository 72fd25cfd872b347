-- name: InsertWorkItem :execlastid
-- work_id is AUTO_RANDOM; the driver returns the generated id. run_after is
-- the database clock plus a delay, never a host's clock. Enqueue finds
-- duplicates with current reads first (LockWorkItemsByEvents), so
-- uk_work_item_event_type only fires for a writer that bypassed it. A
-- dependency declared at enqueue is stored, not checked: the item is
-- claimable and the worker checks it before any work (see dependency.sql).
-- A refused item's record (refused_by_work_id set: its unique key was held,
-- see schema 00027) arrives terminal, ended now by the database's clock.
INSERT INTO work_item (
    event_id, scope_id, generation, work_type, queue_class, state, run_after,
    priority, source_lane_key, target_lane_key, lane_ordinal,
    projection_key, projection_active_key, projection_queued_key,
    dependency_wake_key, dependency_keys, unique_live_key, rate_key,
    refused_by_work_id, failure_class, failure_summary, terminal_at, created_at, updated_at
) VALUES (
    sqlc.arg(event_id), sqlc.arg(scope_id), sqlc.arg(generation),
    sqlc.arg(work_type), sqlc.arg(queue_class), sqlc.arg(state),
    DATE_ADD(NOW(6), INTERVAL CAST(sqlc.arg(delay_micros) AS SIGNED) MICROSECOND),
    sqlc.arg(priority), sqlc.narg(source_lane_key),
    sqlc.narg(target_lane_key), sqlc.arg(lane_ordinal),
    sqlc.narg(projection_key), sqlc.narg(projection_active_key),
    sqlc.narg(projection_queued_key), sqlc.narg(dependency_wake_key), sqlc.narg(dependency_keys),
    sqlc.narg(unique_live_key), sqlc.narg(rate_key),
    sqlc.narg(refused_by_work_id), sqlc.narg(failure_class), sqlc.narg(failure_summary),
    IF(sqlc.narg(refused_by_work_id) IS NULL, NULL, NOW(6)), NOW(6), NOW(6)
);

-- name: GetWorkItem :one
-- Primary-key point read.
SELECT *
FROM work_item
WHERE work_id = sqlc.arg(work_id);

-- name: GetWorkItemByEventAndType :one
-- Point read on uk_work_item_event_type: the item of one event and work type
-- at one replay depth (0: the one enqueue made; see replay.sql).
SELECT *
FROM work_item
WHERE event_id = sqlc.arg(event_id)
  AND work_type = sqlc.arg(work_type)
  AND replay_depth = sqlc.arg(replay_depth);

-- name: LockWorkItemsByEvents :many
-- Existing work of duplicate events, read current and locked for the same
-- reason as LockEventsByIdempotencyKeys. Rides uk_work_item_event_type. A
-- row with refused_by_work_id is a refusal's record: a repeat of its event
-- reports the same refusal (see enqueueTx).
SELECT work_id, event_id, work_type, state, refused_by_work_id
FROM work_item
WHERE event_id IN (sqlc.slice(event_ids))
FOR UPDATE;

-- name: LockWorkItems :many
-- Rows by primary key under a lock (batch point gets), with their current
-- state, lanes and kind: enqueue locks the lane rows it appends behind this
-- way, last, so the locks are held for the batch's final statements only; a
-- batch of finishes locks the followers it found (see promoteAfter) and
-- chooses by class and type those it may take (TakePromotedBatch).
SELECT work_id, state, source_lane_key, target_lane_key, queue_class, work_type
FROM work_item
WHERE work_id IN (sqlc.slice(work_ids))
FOR UPDATE;

-- name: LockLiveUniqueKeys :many
-- The live items holding any of a batch's unique keys (Work.UniqueKey),
-- locked: a batch point get on uk_work_item_unique_live. Enqueue runs it
-- under the scope lock, so two enqueues of one key serialize there; a
-- finisher clearing the key commits before this current read sees the row,
-- or the read waits for its lock.
SELECT work_id, state, unique_live_key
FROM work_item
WHERE unique_live_key IN (sqlc.slice(unique_live_keys))
FOR UPDATE;
