-- name: LockWorkItemForReplay :one
-- Replay's current read of the item to replay, under a row lock taken after
-- the scope lock (LockScopeForEnqueue): the same lock order as enqueue, so a
-- replay and an enqueue into the same lanes serialize on the scope row and
-- never deadlock. Primary-key point get.
SELECT work_id, scope_id, generation, event_id, work_type, state, replay_depth,
       replayed_at, projection_key, source_lane_key, target_lane_key
FROM work_item
WHERE work_id = sqlc.arg(work_id)
FOR UPDATE;

-- name: ReserveReplay :execrows
-- Marks a dead item replayed: the reservation that lets one replay create a
-- child. A compare-and-swap on the row Replay locked: a second replay of the
-- same item matches nothing (its replayed_at is set) and reports the child
-- the first one made. The terminal row is otherwise left as it is: its
-- state, outcome and lease token never change again.
UPDATE work_item
SET replayed_at = NOW(6),
    updated_at = NOW(6)
WHERE work_id = sqlc.arg(work_id)
  AND state = 'dead'
  AND replayed_at IS NULL;

-- name: InsertReplay :execlastid
-- The replay child: a new work item for the parent's event and work type,
-- copied from the parent row in the statement (a primary-key point read), so
-- no column can drift between the parent and the child. It gets its own
-- AUTO_RANDOM id, a fresh lane ordinal (the caller's, reserved under the
-- scope lock: the child joins its lanes behind everything admitted before
-- it, as a new enqueue does), a clean failure budget, and replay_depth one
-- past the parent's, which uk_work_item_event_type keeps unique. It is due
-- now; a dependency it declared is checked again before it runs. A
-- projection generation's child keeps its projection key and becomes the
-- projection's active generation (Replay checked, under the scope lock, that
-- the parent is the projection's newest generation, so none is live).
INSERT INTO work_item (
    event_id, scope_id, generation, work_type, queue_class, state, run_after,
    priority, source_lane_key, target_lane_key, lane_ordinal,
    dependency_wake_key, dependency_keys, replay_of_work_id, replay_depth,
    projection_key, projection_active_key, rate_key, created_at, updated_at
)
SELECT parent.event_id, parent.scope_id, parent.generation, parent.work_type,
       parent.queue_class, sqlc.arg(state), NOW(6), parent.priority,
       parent.source_lane_key, parent.target_lane_key, sqlc.arg(lane_ordinal),
       parent.dependency_wake_key, parent.dependency_keys, parent.work_id,
       parent.replay_depth + 1, parent.projection_key, parent.projection_key,
       parent.rate_key, NOW(6), NOW(6)
FROM work_item AS parent
WHERE parent.work_id = sqlc.arg(parent_work_id);

-- name: ReplayChild :one
-- The child a replay of (event, work type) at a depth made: a point get on
-- uk_work_item_event_type, for reporting it to a replay that lost the
-- reservation.
SELECT work_id, state
FROM work_item
WHERE event_id = sqlc.arg(event_id)
  AND work_type = sqlc.arg(work_type)
  AND replay_depth = sqlc.arg(replay_depth);
