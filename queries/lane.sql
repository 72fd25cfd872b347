-- name: LiveBeforeInSourceLane :many
-- Is any live row ahead of lane_ordinal in this source lane? Used when a new
-- item enters a lane (is it the head?) and when a follower is promoted (is
-- it now the head?). A locking read: current, so a predecessor finished by a
-- transaction we waited for is seen finished, and the row found stays live
-- until we commit (its finisher waits and then sees our follower). Source and
-- target lanes are separate statements so each rides its own index; an OR
-- over both columns reads the whole scope prefix instead.
SELECT work_id
FROM work_item
WHERE scope_id = sqlc.arg(scope_id)
  AND generation = sqlc.arg(generation)
  AND source_lane_key = sqlc.arg(lane_key)
  AND state IN ('pending', 'blocked', 'processing', 'waiting_dependency')
  AND lane_ordinal < sqlc.arg(before_ordinal)
LIMIT 1
FOR UPDATE;

-- name: LiveBeforeInTargetLane :many
-- LiveBeforeInSourceLane for the target lane, on idx_work_item_target_lane.
SELECT work_id
FROM work_item
WHERE scope_id = sqlc.arg(scope_id)
  AND generation = sqlc.arg(generation)
  AND target_lane_key = sqlc.arg(lane_key)
  AND state IN ('pending', 'blocked', 'processing', 'waiting_dependency')
  AND lane_ordinal < sqlc.arg(before_ordinal)
LIMIT 1
FOR UPDATE;

-- name: NextBlockedInSourceLane :many
-- The follower to consider for promotion after the row at after_ordinal left
-- the lane. The range starts after that row, past the delete markers the
-- lane's finished rows left behind. Locked so two finishers of the same
-- follower's two lanes serialize on it and the second sees the first.
SELECT work_id, lease_token, lane_ordinal, source_lane_key, target_lane_key
FROM work_item
WHERE scope_id = sqlc.arg(scope_id)
  AND generation = sqlc.arg(generation)
  AND source_lane_key = sqlc.arg(lane_key)
  AND state = 'blocked'
  AND lane_ordinal > sqlc.arg(after_ordinal)
ORDER BY lane_ordinal, work_id
LIMIT 1
FOR UPDATE;

-- name: NextBlockedInTargetLane :many
-- NextBlockedInSourceLane for the target lane.
SELECT work_id, lease_token, lane_ordinal, source_lane_key, target_lane_key
FROM work_item
WHERE scope_id = sqlc.arg(scope_id)
  AND generation = sqlc.arg(generation)
  AND target_lane_key = sqlc.arg(lane_key)
  AND state = 'blocked'
  AND lane_ordinal > sqlc.arg(after_ordinal)
ORDER BY lane_ordinal, work_id
LIMIT 1
FOR UPDATE;

-- name: PromoteBlocked :execrows
-- blocked -> pending once the row heads both of its lanes. Primary-key CAS on
-- the row version read by NextBlocked*.
UPDATE work_item
SET state = 'pending',
    lease_token = lease_token + 1,
    updated_at = NOW(6)
WHERE work_id = sqlc.arg(work_id)
  AND lease_token = sqlc.arg(lease_token)
  AND state = 'blocked';
