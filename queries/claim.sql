-- name: ClaimCandidates :many
-- Due lane heads of one queue class in claim order (lane_ordinal, run_after,
-- work_id), read straight off idx_work_item_claim: no sort, and rows read are
-- bounded by the limit plus heads that are not due yet. Only lane heads are
-- pending (followers are blocked), so no per-candidate lane probe is needed.
-- floor_ordinal lets a claimer start past keys it already consumed: each
-- claim leaves an MVCC delete marker at the head of this range until GC, and
-- a scan from the start would step over all of them. ceiling_ordinal bounds
-- the window from above, so no statement's range grows with the backlog (on
-- the embedded unistore engine a LIMIT scan costs time in proportion to the
-- live entries up to the end of its range; the claimer walks windows).
-- work_type is the index's last column, so every filter runs on the index and
-- LIMIT is pushed down. The generation comes from the claimer's read of the
-- scope row for this claim; the fence itself is enforced by ClaimBatchCAS. (A
-- scalar subquery here is re-planned on every execution and cost about as
-- much as the scan.)
SELECT w.work_id, w.event_id, w.work_type, w.queue_class, w.lease_token, w.lane_ordinal,
       w.attempt_count, w.safe_retry_count, w.generation, w.source_lane_key, w.target_lane_key
FROM work_item w
WHERE w.scope_id = sqlc.arg(scope_id)
  AND w.generation = sqlc.arg(generation)
  AND w.queue_class = sqlc.arg(queue_class)
  AND w.state = 'pending'
  AND w.lane_ordinal >= sqlc.arg(floor_ordinal)
  AND w.lane_ordinal < sqlc.arg(ceiling_ordinal)
  AND w.run_after <= NOW(6)
  AND w.work_type IN (sqlc.slice(work_types))
ORDER BY w.lane_ordinal, w.run_after, w.work_id
LIMIT ?;

-- name: ClaimBatchCAS :execrows
-- The claim itself: one compare-and-swap over the candidates of a claim
-- turn, by primary key. Each row flips only if it is still a pending, due
-- row of the active generation (pending means lane head, so no lane probe);
-- rows another claimer took first are simply not matched, a normal outcome.
-- claim_ref (unique per claim turn) marks the rows this statement won, for
-- ClaimedByRef to read back. Lease times come from the database clock.
UPDATE work_item w
SET w.state = 'processing',
    w.lease_owner = sqlc.arg(claim_ref),
    w.lease_token = w.lease_token + 1,
    w.lease_until = DATE_ADD(NOW(6), INTERVAL CAST(sqlc.arg(lease_micros) AS SIGNED) MICROSECOND),
    w.attempt_count = w.attempt_count + 1,
    w.updated_at = NOW(6)
WHERE w.work_id IN (sqlc.slice(work_ids))
  AND w.state = 'pending'
  AND w.run_after <= NOW(6)
  AND w.generation = (SELECT s.active_generation FROM scope s WHERE s.scope_id = sqlc.arg(scope_id));

-- name: ClaimedByRef :many
-- The rows ClaimBatchCAS won, with the lease tokens it set: batch point gets
-- on the primary key, filtered by the claim turn's reference.
SELECT work_id, event_id, work_type, queue_class, lease_token, lane_ordinal,
       attempt_count, safe_retry_count, generation, source_lane_key, target_lane_key
FROM work_item
WHERE work_id IN (sqlc.slice(work_ids))
  AND state = 'processing'
  AND lease_owner = sqlc.arg(claim_ref)
ORDER BY lane_ordinal;

-- name: StaleCandidates :many
-- Processing rows whose lease expired by the database clock, oldest expiry
-- first, on idx_work_item_lease. Stale reclaim ignores queue-class
-- preference and keeps this order.
SELECT w.work_id, w.event_id, w.work_type, w.queue_class, w.lease_token, w.lane_ordinal,
       w.attempt_count, w.safe_retry_count, w.generation, w.source_lane_key, w.target_lane_key
FROM work_item w
WHERE w.scope_id = sqlc.arg(scope_id)
  AND w.generation = (SELECT s.active_generation FROM scope s WHERE s.scope_id = sqlc.arg(scope_id))
  AND w.state = 'processing'
  AND w.lease_until < NOW(6)
  AND w.queue_class IN (sqlc.slice(queue_classes))
  AND w.work_type IN (sqlc.slice(work_types))
ORDER BY w.lease_until, w.work_id
LIMIT ?;

-- name: ReclaimCAS :execrows
-- Takes over an expired lease: a CAS on the token the candidate read saw.
-- The new token fences the old holder: no call it makes matches any more.
UPDATE work_item w
SET w.lease_owner = sqlc.arg(lease_owner),
    w.lease_token = w.lease_token + 1,
    w.lease_until = DATE_ADD(NOW(6), INTERVAL CAST(sqlc.arg(lease_micros) AS SIGNED) MICROSECOND),
    w.attempt_count = w.attempt_count + 1,
    w.updated_at = NOW(6)
WHERE w.work_id = sqlc.arg(work_id)
  AND w.lease_token = sqlc.arg(lease_token)
  AND w.state = 'processing'
  AND w.lease_until < NOW(6)
  AND w.generation = (SELECT s.active_generation FROM scope s WHERE s.scope_id = sqlc.arg(scope_id));

-- name: NextWorkAt :many
-- The earliest strictly-future due time of the scope: a pending row's
-- run_after or a processing row's lease expiry. Two ordered LIMIT 1 branches,
-- each starting its index range at NOW(6) (after every consumed key); the
-- caller takes the smaller. Returning rows instead of MIN() keeps "no future
-- work" an empty result rather than a NULL that cannot scan into time.Time.
-- delay_micros is the same instant measured from the database clock, so a
-- worker can arm a local timer without trusting its own wall clock.
(SELECT w.run_after AS due_at, CAST(TIMESTAMPDIFF(MICROSECOND, NOW(6), w.run_after) AS SIGNED) AS delay_micros
 FROM work_item w
 WHERE w.scope_id = sqlc.arg(scope_id)
   AND w.generation = (SELECT s.active_generation FROM scope s WHERE s.scope_id = sqlc.arg(scope_id))
   AND w.state = 'pending'
   AND w.run_after > NOW(6)
 ORDER BY w.run_after
 LIMIT 1)
UNION ALL
(SELECT CAST(l.lease_until AS DATETIME(6)) AS due_at, CAST(TIMESTAMPDIFF(MICROSECOND, NOW(6), l.lease_until) AS SIGNED) AS delay_micros
 FROM work_item l
 WHERE l.scope_id = sqlc.arg(scope_id)
   AND l.generation = (SELECT s.active_generation FROM scope s WHERE s.scope_id = sqlc.arg(scope_id))
   AND l.state = 'processing'
   AND l.lease_until > NOW(6)
 ORDER BY l.lease_until
 LIMIT 1);

-- name: HasDueWork :many
-- Is anything claimable now (a due pending head, or an expired lease)? Cheap
-- hint for wake decisions; the claim path stays the authority.
(SELECT w.work_id
 FROM work_item w
 WHERE w.scope_id = sqlc.arg(scope_id)
   AND w.generation = (SELECT s.active_generation FROM scope s WHERE s.scope_id = sqlc.arg(scope_id))
   AND w.state = 'pending'
   AND w.run_after <= NOW(6)
 LIMIT 1)
UNION ALL
(SELECT l.work_id
 FROM work_item l
 WHERE l.scope_id = sqlc.arg(scope_id)
   AND l.generation = (SELECT s.active_generation FROM scope s WHERE s.scope_id = sqlc.arg(scope_id))
   AND l.state = 'processing'
   AND l.lease_until < NOW(6)
 LIMIT 1);
