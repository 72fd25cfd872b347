-- Operator actions (workqueue.Queue.RetryNow, SkipUnclaimed, PauseClass,
-- ResumeClass): what the laneq command and the dashboard's write actions
-- run. Each acts on one row by primary key, under the row lock its caller
-- took first, and each is a compare-and-swap on the state the caller read,
-- so an item that moved on meanwhile (claimed, finished) matches nothing
-- and the action is refused, never half-applied.

-- name: LockWorkItemForAction :one
-- An action's current read of its item, under a row lock: primary-key point
-- get. not_due compares on the database clock, never a host's. Taken after
-- no other lock: an action locks one item, then its lane followers, the
-- order every finish uses (the rows ahead of a follower are read without
-- locks).
SELECT work_id, scope_id, generation, queue_class, work_type, state, run_after,
       source_lane_key, target_lane_key, lane_ordinal, projection_key,
       projection_active_key, projection_queued_key, lease_token, cancel_reason,
       CAST(run_after > NOW(6) AS SIGNED) AS not_due
FROM work_item
WHERE work_id = sqlc.arg(work_id)
FOR UPDATE;

-- name: RetryNow :execrows
-- A pending item that is not due yet (a retry in backoff, a delayed item)
-- becomes due now. run_after moves to the database's current time, which a
-- claimer's scan floor has not passed (every transition toward claimable
-- sets it so; see ClaimCandidates). The token moves, as on every write.
-- Attempts and the safe-retry count are untouched: the item keeps its
-- failure budget.
UPDATE work_item
SET run_after = NOW(6),
    lease_token = lease_token + 1,
    updated_at = NOW(6)
WHERE work_id = sqlc.arg(work_id)
  AND state = 'pending'
  AND run_after > NOW(6);

-- name: SkipUnclaimed :execrows
-- An operator's skip: an item no process holds (a lane head waiting for its
-- claim or its due time, a lane follower, a dependency waiter) becomes
-- terminal 'skipped' with the operator's reason, and the same terminal
-- columns as Finish, so its lanes move on in this transaction (the caller
-- promotes its followers) and a projection's queued successor takes over
-- (the caller's handoff). A processing row is never matched: its handler
-- is running, and cancelling that is another action.
UPDATE work_item
SET state = 'skipped',
    terminal_at = NOW(6),
    run_after = NOW(6),
    failure_class = sqlc.arg(failure_class),
    failure_summary = sqlc.arg(failure_summary),
    projection_active_key = NULL,
    unique_live_key = NULL,
    lease_owner = NULL,
    lease_token = lease_token + 1,
    updated_at = NOW(6)
WHERE work_id = sqlc.arg(work_id)
  AND state IN ('pending', 'blocked', 'waiting_dependency');

-- name: RequestCancel :execrows
-- Cancelling a running item (Queue.Cancel): its process holds the lease and
-- its handler runs, so the row cannot end here; the request is recorded on
-- it, and the holder learns of it at its next heartbeat (RenewLease matches
-- no row that carries it). A CAS on the token read under the action's lock,
-- which it keeps: the holder's fenced finish must still match, to record the
-- cancellation and hand its lanes over. A primary-key point update.
UPDATE work_item
SET cancel_reason = sqlc.arg(cancel_reason),
    updated_at = NOW(6)
WHERE work_id = sqlc.arg(work_id)
  AND lease_token = sqlc.arg(lease_token)
  AND state = 'processing'
  AND cancel_reason IS NULL;

-- name: LockScopePause :one
-- The paused classes, read current under the scope row's lock, so two
-- operators pausing two classes at once both land: primary-key point get.
-- Enqueue takes the same lock first too; a pause holds it for two
-- statements.
SELECT paused_classes
FROM scope
WHERE scope_id = sqlc.arg(scope_id)
FOR UPDATE;

-- name: SetPausedClasses :execrows
-- Writes the paused classes the caller computed under LockScopePause's lock
-- (a JSON array; NULL for none). Every claimer reads it on its next claim
-- turn or probe (GetScope).
UPDATE scope
SET paused_classes = sqlc.narg(paused_classes),
    updated_at = NOW(6)
WHERE scope_id = sqlc.arg(scope_id);
