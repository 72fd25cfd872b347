-- Lanes. A lane is the live rows of one source or target lane key of one
-- generation, in lane_ordinal order. At most one of them is not blocked: the
-- lane's head (pending, processing, dependency_registration or
-- waiting_dependency), ahead of every blocked row. The lane indexes put
-- state before the ordinal, so each state of a lane is a range of its own.
-- Source and target lanes are read by disjoint branches, each on its own
-- index: an OR over both columns reads the whole scope prefix instead (seed
-- 002's measured falsification).
--
-- One reconciliation path (runtime/workqueue/lanes.go) serves enqueue,
-- replay, every finish (with the projection handoff) and lane recovery:
-- each finds its candidate rows where it stands (its new rows, NextBlocked*
-- behind a finished head, a BlockedPage), asks HeadsAhead and, for lanes
-- without a head, FirstBlockedIn*Lanes whether a live row is ahead of them,
-- and promotes the ones with none by PromoteBlockedBatch, all in the
-- caller's transaction. These reads are keyed by candidate work id, so one
-- statement serves any number of lanes.

-- name: HeadsAhead :many
-- The head ahead of each candidate in its source lane and in its target
-- lane (NULL: none). Two index joins (INL_JOIN): each probes its lane index
-- with the candidate's scope, generation and lane key, the four head states
-- and lane_ordinal below the candidate's as one set of ranges, so it reads
-- the lane's head (at most one entry) however many blocked or terminal rows
-- the lane holds. Without the hint a correlated form is an Apply, whose
-- ranges TiDB v8.5 builds from the equalities only (it read every blocked
-- row of a 10,000-row lane). Not locking: enqueue locks what it found
-- afterwards by primary key; a finisher holds the candidate's lock
-- (NextBlocked*), which serializes the finishers of its two predecessors,
-- and runs READ COMMITTED, so this reads the latest commit; recovery
-- promotes under PromoteBlockedBatch's state guard.
SELECT /*+ INL_JOIN(sh, th) */ c.work_id, sh.work_id AS source_head, th.work_id AS target_head
FROM work_item c
LEFT JOIN work_item sh
  ON sh.scope_id = c.scope_id
 AND sh.generation = c.generation
 AND sh.source_lane_key = c.source_lane_key
 AND sh.state IN ('pending', 'processing', 'dependency_registration', 'waiting_dependency')
 AND sh.lane_ordinal < c.lane_ordinal
LEFT JOIN work_item th
  ON th.scope_id = c.scope_id
 AND th.generation = c.generation
 AND th.target_lane_key = c.target_lane_key
 AND th.state IN ('pending', 'processing', 'dependency_registration', 'waiting_dependency')
 AND th.lane_ordinal < c.lane_ordinal
WHERE c.work_id IN (sqlc.slice(work_ids));

-- name: FirstBlockedInSourceLanes :many
-- For candidates whose source lane HeadsAhead found no head in: the lane's
-- first blocked row when it is ahead of the candidate, else 0. Asked about
-- finished heads (a batch of finishes), it is each lane's next follower: a
-- head is ahead of every blocked row of its lane. A lane without a head can
-- hold any number of blocked rows, each waiting for its other lane: a lane
-- list (an IN over lane keys) would read all of them, so each candidate gets
-- a correlated LIMIT 1 in index order on idx_work_item_source_lane, one
-- entry (one 64-entry batch on the embedded engine) per lane. The ORDER BY
-- names every index column: only then does TiDB keep the index order under
-- the correlated range and push the LIMIT down. A blocked candidate, behind
-- every blocked row ahead of it, is the first blocked row exactly when none
-- is ahead: then blocked_ahead is 0 (no work id is). A lane seen for the
-- first time holds only the candidate. Not locking, like HeadsAhead. A
-- finisher asks only the lanes it must: the embedded engine's time grows
-- with the blocked range read (TiKV stops at the first entry).
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
SELECT work_id, lane_ordinal, source_lane_key, target_lane_key, queue_class, work_type
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
SELECT work_id, lane_ordinal, source_lane_key, target_lane_key, queue_class, work_type
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

-- name: PromoteBlockedBatch :execrows
-- blocked -> pending for the candidates found heading both of their lanes:
-- an enqueue's or a replay's new rows, the followers of finished heads
-- (each locked by NextBlocked*), a recovery page's stranded rows. All of
-- them in one statement, by primary key. The state guard makes a row
-- promoted meanwhile a no-op (recovery reads without locks; rows never go
-- back to blocked). run_after moves up to the database's current time (a
-- delayed item keeps its later time): a row that becomes claimable now must
-- sort after what claimers already consumed, or their scan floors would
-- pass it (see ClaimCandidates).
UPDATE work_item
SET state = 'pending',
    run_after = GREATEST(run_after, NOW(6)),
    lease_token = lease_token + 1,
    updated_at = NOW(6)
WHERE work_id IN (sqlc.slice(work_ids))
  AND state = 'blocked';

-- name: TakePromotedBatch :execrows
-- Claim on promote: a finisher with free executor places takes the lane
-- followers its finish made heads straight to processing, in the finish's
-- transaction, instead of making them pending for a claim turn (scan, CAS,
-- read-back) that a wake starts in every process. The same row transition
-- as PromoteBlockedBatch then ClaimBatchCAS in one write: by primary key
-- (batch point gets), rows the finisher locked (NextBlocked*,
-- LockWorkItems) and read blocked, so the state guard fails only for a row
-- not yet due (a delayed item stays for PromoteBlockedBatch, which keeps
-- its time). claim_ref marks them for ClaimedByRef, which reads them back
-- after the commit and fences a generation made inactive or a class paused
-- meanwhile, as it does for a claim turn.
UPDATE work_item
SET state = 'processing',
    lease_owner = sqlc.arg(claim_ref),
    lease_token = lease_token + 1,
    run_after = DATE_ADD(NOW(6), INTERVAL CAST(sqlc.arg(lease_micros) AS SIGNED) MICROSECOND),
    attempt_count = attempt_count + 1,
    updated_at = NOW(6)
WHERE work_id IN (sqlc.slice(work_ids))
  AND state = 'blocked'
  AND run_after <= NOW(6);

-- name: BlockedPage :many
-- Lane recovery (Queue.RecoverLanes): one page of the active generation's
-- blocked rows after a cursor, on idx_work_item_due's blocked range in
-- (run_after, work_id) order: the OR becomes two ranges of the index, so
-- ties at one time are neither skipped nor read twice, and a page reads at
-- most its LIMIT of entries (plus their row lookups) however many rows are
-- blocked. The scalar subquery (the scope's primary key) is folded into the
-- range before execution. A scope with nothing blocked costs this one
-- statement. Not locking (see PromoteBlockedBatch).
SELECT w.work_id, w.source_lane_key, w.target_lane_key, w.run_after
FROM work_item w
WHERE w.scope_id = sqlc.arg(scope_id)
  AND w.generation = (SELECT s.active_generation FROM scope s WHERE s.scope_id = sqlc.arg(scope_id))
  AND w.state = 'blocked'
  AND (w.run_after > sqlc.arg(after_time) OR (w.run_after = sqlc.arg(after_time) AND w.work_id > sqlc.arg(after_work_id)))
ORDER BY w.run_after, w.work_id
LIMIT ?;
