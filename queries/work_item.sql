-- name: InsertWorkItem :execlastid
-- work_id is AUTO_RANDOM; the driver returns the generated id. A duplicate
-- (event_id, work_type) fails on uk_work_item_event_type: callers resolve it
-- with GetWorkItemByEventAndType under a current read.
INSERT INTO work_item (
    event_id, scope_id, generation, work_type, queue_class, state, run_after,
    priority, source_lane_key, target_lane_key, lane_ordinal,
    projection_key, projection_active_key
) VALUES (
    sqlc.arg(event_id), sqlc.arg(scope_id), sqlc.arg(generation),
    sqlc.arg(work_type), sqlc.arg(queue_class), sqlc.arg(state),
    sqlc.arg(run_after), sqlc.arg(priority), sqlc.narg(source_lane_key),
    sqlc.narg(target_lane_key), sqlc.arg(lane_ordinal),
    sqlc.narg(projection_key), sqlc.narg(projection_active_key)
);

-- name: GetWorkItem :one
-- Primary-key point read.
SELECT *
FROM work_item
WHERE work_id = sqlc.arg(work_id);

-- name: GetWorkItemByEventAndType :one
-- Point read on uk_work_item_event_type.
SELECT *
FROM work_item
WHERE event_id = sqlc.arg(event_id)
  AND work_type = sqlc.arg(work_type);
