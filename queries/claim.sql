-- name: ClaimCandidates :many
-- Due lane heads of one queue class in claim order (run_after, lane_ordinal,
-- work_id), read straight off idx_work_item_claim: no sort, and every filter
-- runs on the index so LIMIT is pushed down. Only lane heads are pending
-- (followers are blocked), so no per-candidate lane probe is needed.
--
-- The range is one window [from_time, until_time] of the pending range, and
-- until_time is at most the database's current time (from GetScope): rows not
-- yet due (retries in backoff, delayed items), however many, lie past its
-- end and are never read. from_time is the claimer's floor: every transition
-- into pending sets run_after to at least the database's current time, so
-- what becomes claimable later sorts after what the claimer consumed, and the
-- MVCC delete markers its earlier claims left lie before the floor. The
-- claimer sizes the window to what the range yields, because on the embedded
-- engine a scan costs time for every live entry in its range, LIMIT or not.
-- The generation comes from the claimer's read of the scope row for this
-- turn; the fence itself is enforced by ClaimBatchCAS and ClaimedByRef.
-- Only columns of idx_work_item_claim: the scan never reads a table row
-- (an index-only read, no per-candidate lookup); ClaimedByRef reads the
-- rows the CAS won, so rows lost to another claimer are never read whole.
SELECT w.work_id, w.work_type, w.run_after, w.lane_ordinal
FROM work_item w
WHERE w.scope_id = sqlc.arg(scope_id)
  AND w.generation = sqlc.arg(generation)
  AND w.queue_class = sqlc.arg(queue_class)
  AND w.state = 'pending'
  AND w.run_after >= sqlc.arg(from_time)
  AND w.run_after <= sqlc.arg(until_time)
  AND w.work_type IN (sqlc.slice(work_types))
ORDER BY w.run_after, w.lane_ordinal, w.work_id
LIMIT ?;

-- name: ClaimBatchCAS :execrows
-- The claim itself: one compare-and-swap over the candidates of a claim
-- turn, by primary key. Each row flips only if it is still a pending, due
-- row of the generation the turn read from the scope (pending means lane
-- head, so no lane probe); rows another claimer took first are simply not
-- matched, a normal outcome. claim_ref (unique per claim turn) marks the
-- rows this statement won, for ClaimedByRef to read back. run_after becomes
-- the lease expiry, from the database clock. The generation is an argument,
-- not a read of the scope row: a scalar subquery makes TiDB refuse to cache
-- the plan, and a join gave a plan shape that changed with statistics.
-- ClaimedByRef reads the active generation after this statement returned
-- and releases, unrun, rows of a generation that is no longer active.
UPDATE work_item w
SET w.state = 'processing',
    w.lease_owner = sqlc.arg(claim_ref),
    w.lease_token = w.lease_token + 1,
    w.run_after = DATE_ADD(NOW(6), INTERVAL CAST(sqlc.arg(lease_micros) AS SIGNED) MICROSECOND),
    w.attempt_count = w.attempt_count + 1,
    w.updated_at = NOW(6)
WHERE w.work_id IN (sqlc.slice(work_ids))
  AND w.state = 'pending'
  AND w.run_after <= NOW(6)
  AND w.generation = sqlc.arg(generation);

-- name: ClaimedByRef :many
-- The rows ClaimBatchCAS won, with the lease tokens it set and the events
-- their executors run on: batch point gets on the primary keys, filtered by
-- the claim turn's reference, and the scope's active generation read again.
-- A CAS that read the old generation just before SetGeneration committed can
-- still win rows; this read starts after the CAS returned, so it sees any
-- generation change that committed before then, and the claimer releases
-- such rows unrun; likewise rows of a class paused meanwhile (paused_classes,
-- for rows a finisher took, TakePromotedBatch, whose pause no scope read
-- checked). Idempotent: a claimer that lost the reply of the CAS or
-- of this read runs it again with the same reference to learn what it owns.
-- Reading the events here saves a claim turn its own event load; they are
-- read whole (sqlc.embed), as GetEvent reads them, for one row mapper.
-- INL_JOIN keeps both joins index nested-loop joins on the primary keys: read
-- whole, the event made TiDB pick an index hash join at scale 10000 (the same
-- rows read); the hint keeps the reviewed plan stable.
SELECT /*+ INL_JOIN(s, e) */ w.work_id, w.event_id, w.work_type, w.queue_class, w.lease_token, w.lane_ordinal,
       w.attempt_count, w.safe_retry_count, w.generation, w.source_lane_key, w.target_lane_key,
       w.run_after, w.dependency_wake_key, w.dependency_keys, w.projection_key, w.rate_key,
       s.active_generation, s.paused_classes, sqlc.embed(e)
FROM work_item w
JOIN scope s ON s.scope_id = w.scope_id
JOIN event e ON e.event_id = w.event_id
WHERE w.work_id IN (sqlc.slice(work_ids))
  AND w.state = 'processing'
  AND w.lease_owner = sqlc.arg(claim_ref)
ORDER BY w.run_after, w.lane_ordinal;

-- name: StaleCandidates :many
-- Processing rows of one queue class whose lease expired by the database
-- clock, oldest expiry first, on idx_work_item_claim: the class leads the
-- expiry, so expired leases of other classes are outside the range. For a
-- processing row run_after is the lease expiry; live leases lie past
-- until_time (the database's current time). from_time is the claimer's stale
-- floor: a lease expires only by time passing, never by a write that places
-- it in the past, so expiries the claimer's last complete scan saw need not
-- be read again (the MVCC delete markers of renewals and finishes lie there).
-- cancel_reason says the row's cancellation was requested: the claimer ends
-- it cancelled (FinishExpired) instead of taking it over.
SELECT w.work_id, w.event_id, w.work_type, w.queue_class, w.lease_token, w.lane_ordinal,
       w.attempt_count, w.safe_retry_count, w.generation, w.source_lane_key, w.target_lane_key,
       w.run_after, w.projection_key, w.cancel_reason
FROM work_item w
WHERE w.scope_id = sqlc.arg(scope_id)
  AND w.generation = sqlc.arg(generation)
  AND w.queue_class = sqlc.arg(queue_class)
  AND w.state = 'processing'
  AND w.run_after >= sqlc.arg(from_time)
  AND w.run_after < sqlc.arg(until_time)
  AND w.work_type IN (sqlc.slice(work_types))
ORDER BY w.run_after, w.lane_ordinal, w.work_id
LIMIT ?;

-- name: ReclaimCAS :execrows
-- Takes over an expired lease: a CAS on the token the candidate read saw.
-- The new token fences the old holder: no call it makes matches any more.
-- Only while attempts remain and no cancellation was requested; an item at
-- its attempt budget goes to dead, and a cancelled one to skipped, through
-- FinishExpired instead.
UPDATE work_item w
SET w.lease_owner = sqlc.arg(lease_owner),
    w.lease_token = w.lease_token + 1,
    w.run_after = DATE_ADD(NOW(6), INTERVAL CAST(sqlc.arg(lease_micros) AS SIGNED) MICROSECOND),
    w.attempt_count = w.attempt_count + 1,
    w.updated_at = NOW(6)
WHERE w.work_id = sqlc.arg(work_id)
  AND w.lease_token = sqlc.arg(lease_token)
  AND w.state = 'processing'
  AND w.run_after < NOW(6)
  AND w.attempt_count < sqlc.arg(max_attempts)
  AND w.cancel_reason IS NULL
  AND w.generation = (SELECT s.active_generation FROM scope s WHERE s.scope_id = sqlc.arg(scope_id));

-- name: NextWorkAt :many
-- The earliest due time in one span (now + from_micros, now + until_micros]
-- of the scope: a pending row's run_after (a retry or delayed item coming
-- due) or a processing row's lease expiry. Two ordered LIMIT 1 branches on
-- idx_work_item_due; the caller takes the smaller and walks spans of growing
-- width, nearest first, so no statement's range holds more than one span of
-- the not-due backlog (the embedded engine reads every live entry of a
-- range). Rows instead of MIN() keep "nothing in this span" an empty result
-- rather than a NULL that cannot scan into time.Time. delay_micros is the
-- same instant measured from the database clock, so a worker arms a local
-- timer without comparing two hosts' wall clocks. The lease branch starts at
-- lease_from_micros, which a claimer sets up to a few seconds before now: a
-- lease that ran out after its last claim turn read it live is claimable
-- yet announced by nobody (its process is gone), so the lookup after that
-- turn must see it; pending rows that came due meanwhile were announced.
(SELECT w.run_after AS due_at, CAST(TIMESTAMPDIFF(MICROSECOND, NOW(6), w.run_after) AS SIGNED) AS delay_micros
 FROM work_item w
 WHERE w.scope_id = sqlc.arg(scope_id)
   AND w.generation = (SELECT s.active_generation FROM scope s WHERE s.scope_id = sqlc.arg(scope_id))
   AND w.state = 'pending'
   AND w.run_after > DATE_ADD(NOW(6), INTERVAL CAST(sqlc.arg(from_micros) AS SIGNED) MICROSECOND)
   AND w.run_after <= DATE_ADD(NOW(6), INTERVAL CAST(sqlc.arg(until_micros) AS SIGNED) MICROSECOND)
 ORDER BY w.run_after
 LIMIT 1)
UNION ALL
(SELECT l.run_after AS due_at, CAST(TIMESTAMPDIFF(MICROSECOND, NOW(6), l.run_after) AS SIGNED) AS delay_micros
 FROM work_item l
 WHERE l.scope_id = sqlc.arg(scope_id)
   AND l.generation = (SELECT s.active_generation FROM scope s WHERE s.scope_id = sqlc.arg(scope_id))
   AND l.state = 'processing'
   AND l.run_after > DATE_ADD(NOW(6), INTERVAL CAST(sqlc.arg(lease_from_micros) AS SIGNED) MICROSECOND)
   AND l.run_after <= DATE_ADD(NOW(6), INTERVAL CAST(sqlc.arg(until_micros) AS SIGNED) MICROSECOND)
 ORDER BY l.run_after
 LIMIT 1);
