-- Statements of `laneq bench` (cmd/laneq/bench) on its own tables and its
-- read-back of a finished run. Bench only: not part of the catalog backend
-- teams import, never run by the runtime, not plan-checked (the verifier
-- reads every row of a bench database on purpose).
--
-- Every statement names a bench_ table or, on laneq's own tables, a bench_
-- alias: the bench leaves statements whose text matches bench_ out of the
-- RU and statements it reports for laneq (internal/serverusage.ReadExcept).

-- name: StartAttempt :execlastid
-- Written by the handler before it does anything, in its own autocommit:
-- an attempt that a kill cuts short is still on record.
INSERT INTO bench_attempt (process, work_id, lease_token, attempt, reclaimed, claim_us, stubborn, started_at)
VALUES (sqlc.arg(process), sqlc.arg(work_id), sqlc.arg(lease_token), sqlc.arg(attempt), sqlc.arg(reclaimed), sqlc.arg(claim_us), sqlc.arg(stubborn), NOW(6));

-- name: EndAttempt :exec
-- Written when the handler returns, before the outcome's write.
UPDATE bench_attempt SET ended_at = NOW(6), outcome = sqlc.arg(outcome)
WHERE attempt_id = sqlc.arg(attempt_id);

-- name: SetFinishAccepted :exec
-- Accepted verdicts are written in batches (one statement per flush).
UPDATE bench_attempt SET finish = 'accepted', finish_at = NOW(6)
WHERE attempt_id IN (sqlc.slice(attempt_ids));

-- name: SetFinishRejected :exec
UPDATE bench_attempt SET finish = 'rejected', finish_error = sqlc.arg(finish_error), finish_at = NOW(6)
WHERE attempt_id = sqlc.arg(attempt_id);

-- name: MoveAttemptStart :exec
-- The verifier's self-test only: plants a lane inversion by moving an
-- attempt's start.
UPDATE bench_attempt SET started_at = sqlc.arg(started_at)
WHERE attempt_id = sqlc.arg(attempt_id);

-- name: BeginFault :execlastid
INSERT INTO bench_fault (kind, process, detail, started_at)
VALUES (sqlc.arg(kind), sqlc.arg(process), sqlc.arg(detail), NOW(6));

-- name: EndFault :exec
UPDATE bench_fault SET ended_at = NOW(6), detail = sqlc.arg(detail)
WHERE fault_id = sqlc.arg(fault_id);

-- name: ListAttempts :many
SELECT attempt_id, process, work_id, lease_token, attempt, reclaimed, claim_us,
       started_at, ended_at, outcome, finish, finish_error, finish_at, stubborn
FROM bench_attempt
ORDER BY work_id, started_at, attempt_id;

-- name: ListFaults :many
SELECT fault_id, kind, process, detail, started_at, ended_at
FROM bench_fault
ORDER BY started_at, fault_id;

-- name: ListRunItems :many
-- Every work item of the bench database with what the verifier needs:
-- lanes and ordinal for lane order, terminal time for end-to-end latency,
-- the failure class that says a skipped item was cancelled.
SELECT work_id, scope_id, work_type, queue_class, state, lease_token, attempt_count,
       source_lane_key, target_lane_key, lane_ordinal, projection_key,
       created_at, terminal_at, failure_class
FROM work_item AS bench_items
ORDER BY scope_id, lane_ordinal, work_id;

-- name: CountRunItemStates :many
-- The progress line: items per state across the bench database.
SELECT state, COUNT(*) AS items
FROM work_item AS bench_items
GROUP BY state;

-- name: CountRunEvents :one
SELECT COUNT(*) FROM event AS bench_events;

-- name: CountInFlight :many
-- Attempts running right now per process: a kill picks the busiest one, so
-- it lands mid-execution.
SELECT process, COUNT(*) AS running
FROM bench_attempt
WHERE ended_at IS NULL
GROUP BY process;

-- name: LeasesHeldBy :one
-- A freeze's barrier: the items a process still holds by the token one of
-- its unanswered attempts runs on (handler running, or its outcome's write
-- not yet answered). A takeover raises the token, a finish moves the item
-- out of processing; the bench keeps the process frozen until this is
-- zero, so every stale finalization it makes on waking meets a new token.
SELECT COUNT(*) AS held
FROM bench_attempt a
JOIN work_item w ON w.work_id = a.work_id
WHERE a.process = sqlc.arg(process)
  AND a.finish IS NULL
  AND w.state = 'processing'
  AND w.lease_token = a.lease_token;

-- name: BenchNow :one
-- The database's clock, as work_item.created_at reads it.
SELECT NOW(6) AS bench_now;

-- name: ListTickKeys :many
-- The periodic schedule's ticks (Spec.Periodic): their idempotency keys
-- name the tick's instant (runtime/periodic).
SELECT scope_id, idempotency_key
FROM event AS bench_events
WHERE idempotency_key LIKE 'periodic/%'
ORDER BY scope_id, idempotency_key;

-- name: RateGrants :one
-- The rate limit's budget rows (Spec.RateLimit, ten windows a second):
-- the most any window granted, and the most any ten consecutive windows
-- (one second) granted.
SELECT CAST(COALESCE(MAX(granted), 0) AS SIGNED) AS busiest_window,
       CAST(COALESCE(MAX(per_second), 0) AS SIGNED) AS busiest_second
FROM (
    SELECT granted, SUM(granted) OVER (PARTITION BY scope_id, limit_name ORDER BY window_index RANGE BETWEEN 9 PRECEDING AND CURRENT ROW) AS per_second
    FROM rate_window AS bench_rate
) AS bench_windows;

-- name: NextStubbornToCancel :one
-- The cancel driver's pick: the stubborn attempt that started last among
-- those still running (no end) on the lease their item is held by, whose
-- cancellation was not requested yet. The latest start makes the
-- cancellation land before the attempt's deadline, so it is the cancel,
-- not the deadline, that tells the handler to stop.
SELECT a.work_id, w.scope_id, a.process
FROM bench_attempt a
JOIN work_item w ON w.work_id = a.work_id
WHERE a.stubborn
  AND a.ended_at IS NULL
  AND w.state = 'processing'
  AND w.lease_token = a.lease_token
  AND w.cancel_reason IS NULL
ORDER BY a.started_at DESC
LIMIT 1;

-- name: BeginCancel :execlastid
INSERT INTO bench_cancel (work_id, process, requested_at)
VALUES (sqlc.arg(work_id), sqlc.arg(process), NOW(6));

-- name: EndCancel :exec
UPDATE bench_cancel SET outcome = sqlc.arg(outcome), answered_at = NOW(6)
WHERE cancel_id = sqlc.arg(cancel_id);

-- name: ListCancels :many
SELECT cancel_id, work_id, process, requested_at, outcome, answered_at
FROM bench_cancel
ORDER BY requested_at, cancel_id;
