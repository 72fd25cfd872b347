-- name: LockLiveBeforeInSourceLane :many
-- Enqueue: is any live row ahead of before_ordinal in this source lane (then
-- the new item is blocked)? A locking read: current, and the row it finds
-- stays live until the enqueue commits, so a finisher of that row waits and
-- then sees the new follower. Without the lock, a finisher committing between
-- this read and the enqueue's commit would miss the follower and strand it.
-- Source and target lanes are separate statements so each rides its own
-- index; an OR over both columns reads the whole scope prefix instead.
SELECT work_id
FROM work_item
WHERE scope_id = sqlc.arg(scope_id)
  AND generation = sqlc.arg(generation)
  AND source_lane_key = sqlc.arg(lane_key)
  AND state IN ('pending', 'blocked', 'processing', 'waiting_dependency')
  AND lane_ordinal < sqlc.arg(before_ordinal)
LIMIT 1
FOR UPDATE;

-- name: LockLiveBeforeInTargetLane :many
-- LockLiveBeforeInSourceLane for the target lane, on idx_work_item_target_lane.
SELECT work_id
FROM work_item
WHERE scope_id = sqlc.arg(scope_id)
  AND generation = sqlc.arg(generation)
  AND target_lane_key = sqlc.arg(lane_key)
  AND state IN ('pending', 'blocked', 'processing', 'waiting_dependency')
  AND lane_ordinal < sqlc.arg(before_ordinal)
LIMIT 1
FOR UPDATE;

-- name: LiveBeforeInSourceLane :many
-- Promotion: does a follower still have a live predecessor in its other
-- lane? Deliberately not locking, and run in a READ COMMITTED finish
-- transaction so it still reads the latest commit: two finishers of a
-- follower's two predecessors serialize on the follower's lock, and the
-- second one's read sees the first's commit. A locking read here would lock
-- the other finisher's row while it waits for the follower: a deadlock.
SELECT work_id
FROM work_item
WHERE scope_id = sqlc.arg(scope_id)
  AND generation = sqlc.arg(generation)
  AND source_lane_key = sqlc.arg(lane_key)
  AND state IN ('pending', 'blocked', 'processing', 'waiting_dependency')
  AND lane_ordinal < sqlc.arg(before_ordinal)
LIMIT 1;

-- name: LiveBeforeInTargetLane :many
-- LiveBeforeInSourceLane for the target lane.
SELECT work_id
FROM work_item
WHERE scope_id = sqlc.arg(scope_id)
  AND generation = sqlc.arg(generation)
  AND target_lane_key = sqlc.arg(lane_key)
  AND state IN ('pending', 'blocked', 'processing', 'waiting_dependency')
  AND lane_ordinal < sqlc.arg(before_ordinal)
LIMIT 1;

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
