-- Lanes. A lane is the live rows of one source or target lane key of one
-- generation, in lane_ordinal order. At most one of them is not blocked: the
-- lane's head (pending, processing, dependency_registration or
-- waiting_dependency); every live row after it is blocked. The lane indexes
-- put state before the ordinal, so the head is a range of its own: a probe
-- for it reads one entry however many followers the lane has. Source and target lanes are disjoint UNION ALL
-- branches, each on its own index: an OR over both columns reads the whole
-- scope prefix instead (seed 002's measured falsification).

-- name: LaneHeads :many
-- Enqueue: the heads of the lanes a batch appends to, all lanes in one
-- statement (a point range per lane and head state). Not locking: enqueue
-- runs in READ COMMITTED, so this reads the latest commit; the heads found
-- are locked afterwards by primary key (LockWorkItems), at the end of the
-- batch, so a running head's lease renewal waits for a few statements, not
-- for the whole batch.
(SELECT w.work_id, w.state, w.lane_ordinal, 'source' AS lane_kind, w.source_lane_key AS lane_key
 FROM work_item w
 WHERE w.scope_id = sqlc.arg(scope_id)
   AND w.generation = sqlc.arg(generation)
   AND w.source_lane_key IN (sqlc.slice(source_lanes))
   AND w.state IN ('pending', 'processing', 'dependency_registration', 'waiting_dependency')
   AND w.lane_ordinal < sqlc.arg(before_ordinal))
UNION ALL
(SELECT t.work_id, t.state, t.lane_ordinal, 'target' AS lane_kind, t.target_lane_key AS lane_key
 FROM work_item t
 WHERE t.scope_id = sqlc.arg(scope_id)
   AND t.generation = sqlc.arg(generation)
   AND t.target_lane_key IN (sqlc.slice(target_lanes))
   AND t.state IN ('pending', 'processing', 'dependency_registration', 'waiting_dependency')
   AND t.lane_ordinal < sqlc.arg(before_ordinal));

-- name: FirstBlockedInSourceLanes :many
-- Enqueue, for each lane LaneHeads found no head in: the lane's first
-- blocked row when it is ahead of the candidate (the batch's first row in
-- that lane, passed by work id), else NULL. A lane without a head can hold
-- any number of blocked rows, each waiting for its other lane: a lane list
-- (an IN over lane keys) would read all of them, so each candidate gets a
-- correlated LIMIT 1 in index order on idx_work_item_source_lane, one
-- entry (one 64-entry batch on the embedded engine) per lane. The ORDER BY
-- names every index column: only then does TiDB keep the index order under
-- the correlated range and push the LIMIT down. The candidate, blocked and
-- behind every row already in the lane, is the first blocked row exactly
-- when none is ahead: then blocked_ahead is 0 (no work id is). A lane seen
-- for the first time holds only the candidate. Not locking, like LaneHeads.
SELECT c.work_id,
       CAST(COALESCE(NULLIF((SELECT b.work_id
               FROM work_item b
               WHERE b.scope_id = c.scope_id
                 AND b.generation = c.generation
                 AND b.source_lane_key = c.source_lane_key
                 AND b.state = 'blocked'
               ORDER BY b.scope_id, b.generation, b.source_lane_key, b.state, b.lane_ordinal, b.work_id
               LIMIT 1), c.work_id), 0) AS SIGNED) AS blocked_ahead
FROM work_item c
WHERE c.work_id IN (sqlc.slice(work_ids));

-- name: FirstBlockedInTargetLanes :many
-- FirstBlockedInSourceLanes for target lanes, on idx_work_item_target_lane.
SELECT c.work_id,
       CAST(COALESCE(NULLIF((SELECT b.work_id
               FROM work_item b
               WHERE b.scope_id = c.scope_id
                 AND b.generation = c.generation
                 AND b.target_lane_key = c.target_lane_key
                 AND b.state = 'blocked'
               ORDER BY b.scope_id, b.generation, b.target_lane_key, b.state, b.lane_ordinal, b.work_id
               LIMIT 1), c.work_id), 0) AS SIGNED) AS blocked_ahead
FROM work_item c
WHERE c.work_id IN (sqlc.slice(work_ids));

-- name: HeadBefore :many
-- Promotion: does a follower still have a live head ahead of it in its
-- source or target lane (pass NULL for a lane not to look at)? Deliberately
-- not locking, and run in a READ COMMITTED finish transaction so it reads
-- the latest commit: two finishers of a follower's two predecessors
-- serialize on the follower's lock, and the second one's read sees the
-- first's commit. A locking read here would lock the other finisher's row
-- while it waits for the follower: a deadlock.
(SELECT w.work_id
 FROM work_item w
 WHERE w.scope_id = sqlc.arg(scope_id)
   AND w.generation = sqlc.arg(generation)
   AND w.source_lane_key = sqlc.narg(source_lane)
   AND w.state IN ('pending', 'processing', 'dependency_registration', 'waiting_dependency')
   AND w.lane_ordinal < sqlc.arg(before_ordinal)
 LIMIT 1)
UNION ALL
(SELECT t.work_id
 FROM work_item t
 WHERE t.scope_id = sqlc.arg(scope_id)
   AND t.generation = sqlc.arg(generation)
   AND t.target_lane_key = sqlc.narg(target_lane)
   AND t.state IN ('pending', 'processing', 'dependency_registration', 'waiting_dependency')
   AND t.lane_ordinal < sqlc.arg(before_ordinal)
 LIMIT 1);

-- name: BlockedBefore :many
-- Promotion, when HeadBefore found no head: is a blocked row ahead of the
-- follower in those lanes? Only a lane without a head can hold one (its rows
-- all wait for their other lanes), so this range is that rare lane's rows.
-- Not locking, for the reason HeadBefore gives.
(SELECT w.work_id
 FROM work_item w
 WHERE w.scope_id = sqlc.arg(scope_id)
   AND w.generation = sqlc.arg(generation)
   AND w.source_lane_key = sqlc.narg(source_lane)
   AND w.state = 'blocked'
   AND w.lane_ordinal < sqlc.arg(before_ordinal)
 LIMIT 1)
UNION ALL
(SELECT t.work_id
 FROM work_item t
 WHERE t.scope_id = sqlc.arg(scope_id)
   AND t.generation = sqlc.arg(generation)
   AND t.target_lane_key = sqlc.narg(target_lane)
   AND t.state = 'blocked'
   AND t.lane_ordinal < sqlc.arg(before_ordinal)
 LIMIT 1);

-- name: NextBlockedInSourceLane :many
-- The follower to consider for promotion after the row at after_ordinal left
-- the lane, looked for in the ordinal window (after_ordinal, until_ordinal]:
-- the caller widens the window until it finds one or passes the scope's last
-- ordinal, so a lane with thousands of followers costs a window's worth of
-- entries, not the lane's length. The range starts after the finished row,
-- past the delete markers the lane's finished rows left behind. Locked so two
-- finishers of the same follower's two lanes serialize on it and the second
-- sees the first. (A locking read cannot be a UNION ALL branch: source and
-- target are two statements.)
SELECT work_id, lease_token, lane_ordinal, source_lane_key, target_lane_key
FROM work_item
WHERE scope_id = sqlc.arg(scope_id)
  AND generation = sqlc.arg(generation)
  AND source_lane_key = sqlc.arg(lane_key)
  AND state = 'blocked'
  AND lane_ordinal > sqlc.arg(after_ordinal)
  AND lane_ordinal <= sqlc.arg(until_ordinal)
ORDER BY lane_ordinal, work_id
LIMIT 1
FOR UPDATE;

-- name: NextBlockedInTargetLane :many
-- NextBlockedInSourceLane for the target lane, on idx_work_item_target_lane.
SELECT work_id, lease_token, lane_ordinal, source_lane_key, target_lane_key
FROM work_item
WHERE scope_id = sqlc.arg(scope_id)
  AND generation = sqlc.arg(generation)
  AND target_lane_key = sqlc.arg(lane_key)
  AND state = 'blocked'
  AND lane_ordinal > sqlc.arg(after_ordinal)
  AND lane_ordinal <= sqlc.arg(until_ordinal)
ORDER BY lane_ordinal, work_id
LIMIT 1
FOR UPDATE;

-- name: PromoteBlocked :execrows
-- blocked -> pending once the row heads both of its lanes. Primary-key CAS on
-- the row version read by NextBlocked*. run_after moves up to the database's
-- current time (a delayed item keeps its later time): a row that becomes
-- claimable now must sort after what claimers already consumed, or their
-- scan floors would pass it (see ClaimCandidates).
UPDATE work_item
SET state = 'pending',
    run_after = GREATEST(run_after, NOW(6)),
    lease_token = lease_token + 1,
    updated_at = NOW(6)
WHERE work_id = sqlc.arg(work_id)
  AND lease_token = sqlc.arg(lease_token)
  AND state = 'blocked';

-- name: PromoteBlockedBatch :execrows
-- blocked -> pending for rows the caller holds locked and found heading
-- both of their lanes: the first row of each lane of an enqueue batch with
-- no live row ahead (checked under locks just before), or the followers a
-- batch of completions promotes (each locked by NextBlocked*), written
-- together at the end of that transaction. All of them in one statement,
-- by primary key; run_after as in PromoteBlocked.
UPDATE work_item
SET state = 'pending',
    run_after = GREATEST(run_after, NOW(6)),
    lease_token = lease_token + 1,
    updated_at = NOW(6)
WHERE work_id IN (sqlc.slice(work_ids))
  AND state = 'blocked';

-- name: BlockedPage :many
-- Lane recovery (Queue.RecoverLanes): one page of the active generation's
-- blocked rows after a cursor, on idx_work_item_due's blocked range in
-- (run_after, work_id) order: the OR becomes two ranges of the index, so
-- ties at one time are neither skipped nor read twice, and a page reads at
-- most its LIMIT of entries (plus their row lookups) however many rows are
-- blocked. The scalar subquery (the scope's primary key) is folded into the
-- range before execution. A scope with nothing blocked costs this one
-- statement. Not locking: a row found stranded is promoted by a CAS on the
-- token read here (PromoteBlocked).
SELECT w.work_id, w.lease_token, w.lane_ordinal, w.generation, w.source_lane_key,
       w.target_lane_key, w.run_after
FROM work_item w
WHERE w.scope_id = sqlc.arg(scope_id)
  AND w.generation = (SELECT s.active_generation FROM scope s WHERE s.scope_id = sqlc.arg(scope_id))
  AND w.state = 'blocked'
  AND (w.run_after > sqlc.arg(after_time) OR (w.run_after = sqlc.arg(after_time) AND w.work_id > sqlc.arg(after_work_id)))
ORDER BY w.run_after, w.work_id
LIMIT ?;
