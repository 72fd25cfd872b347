-- name: RenewLease :execrows
-- Heartbeat: moves the lease expiry (run_after, while processing) from the
-- database clock. Keeps the token, so the holder's later calls stay valid.
-- A row whose cancellation was requested (cancel_reason, RequestCancel) is
-- not renewed: the holder reads the row back (GetLeaseState), learns of the
-- cancellation and cancels its handler, and holds the row (HoldLease) until
-- the handler returns; a claimer that finds the lease expired (its holder
-- died or lost the database) ends it cancelled.
UPDATE work_item
SET run_after = DATE_ADD(NOW(6), INTERVAL CAST(sqlc.arg(lease_micros) AS SIGNED) MICROSECOND),
    updated_at = NOW(6)
WHERE work_id = sqlc.arg(work_id)
  AND lease_token = sqlc.arg(lease_token)
  AND state = 'processing'
  AND cancel_reason IS NULL;

-- name: HoldLease :execrows
-- Heartbeat of an attempt told to stop (its cancellation was requested, its
-- deadline passed, its process is stopping) whose handler has not returned:
-- the item stays its holder's, and its lanes stay blocked, until the handler
-- returns, because the handler may still act. So unlike RenewLease it
-- renews a row whose cancellation was requested; only the token fences it.
-- A primary-key point update, as RenewLease.
UPDATE work_item
SET run_after = DATE_ADD(NOW(6), INTERVAL CAST(sqlc.arg(lease_micros) AS SIGNED) MICROSECOND),
    updated_at = NOW(6)
WHERE work_id = sqlc.arg(work_id)
  AND lease_token = sqlc.arg(lease_token)
  AND state = 'processing';

-- name: RenewLeaseBatch :execrows
-- RenewLease for many items of one process whose heartbeats fell due
-- together (items claimed in one turn share their heartbeat times): a batch
-- point get on the primary key, each row fenced by its own "id:token" entry
-- in fences, as FinishLanelessBatch. The caller reads back which entries
-- matched (LeaseStates) when fewer rows than entries matched; as for
-- RenewLease, a row whose cancellation was requested is not renewed.
UPDATE work_item
SET run_after = DATE_ADD(NOW(6), INTERVAL CAST(sqlc.arg(lease_micros) AS SIGNED) MICROSECOND),
    updated_at = NOW(6)
WHERE work_id IN (sqlc.slice(work_ids))
  AND FIND_IN_SET(CONCAT(work_id, ':', lease_token), CAST(sqlc.arg(fences) AS CHAR)) > 0
  AND state = 'processing'
  AND cancel_reason IS NULL;

-- name: RecordProgress :execrows
-- Durable forward progress inside a long attempt: ends the consecutive
-- safe-retry series so the next failure backs off from the start.
UPDATE work_item
SET safe_retry_count = 0,
    updated_at = NOW(6)
WHERE work_id = sqlc.arg(work_id)
  AND lease_token = sqlc.arg(lease_token)
  AND state = 'processing';

-- name: ReleaseLease :execrows
-- Gives the item back unexecuted, due after delay_micros from the database
-- clock: 0 for shutdown and drain (due at once, for another process), the
-- rest of a window when a rate limit's budget ran out between its claim
-- and its start (runtime/ratelimit). The attempt is not counted against the
-- item's budget. It stays its lanes' head, so followers remain blocked.
-- run_after at or after now keeps claimers' floors valid (see
-- ClaimCandidates). A row whose cancellation was requested is never given
-- back (it would run again): the holder finds the request on the read-back
-- and finishes it cancelled (Queue.FinishCancelled).
UPDATE work_item
SET state = 'pending',
    run_after = DATE_ADD(NOW(6), INTERVAL CAST(sqlc.arg(delay_micros) AS SIGNED) MICROSECOND),
    attempt_count = GREATEST(attempt_count - 1, 0),
    lease_owner = NULL,
    lease_token = lease_token + 1,
    updated_at = NOW(6)
WHERE work_id = sqlc.arg(work_id)
  AND lease_token = sqlc.arg(lease_token)
  AND state = 'processing'
  AND cancel_reason IS NULL;

-- name: RetryLater :execrows
-- A safe retry: pending again after a backoff computed from the consecutive
-- safe-retry count, which this increments. Still its lanes' head. Not for
-- a row whose cancellation was requested (see ReleaseLease).
UPDATE work_item
SET state = 'pending',
    run_after = DATE_ADD(NOW(6), INTERVAL CAST(sqlc.arg(delay_micros) AS SIGNED) MICROSECOND),
    safe_retry_count = safe_retry_count + 1,
    failure_class = sqlc.arg(failure_class),
    failure_summary = sqlc.arg(failure_summary),
    lease_owner = NULL,
    lease_token = lease_token + 1,
    updated_at = NOW(6)
WHERE work_id = sqlc.arg(work_id)
  AND lease_token = sqlc.arg(lease_token)
  AND state = 'processing'
  AND cancel_reason IS NULL;

-- name: Finish :execrows
-- Terminal transition of the claimed row only: completed, skipped or dead.
-- Clears the projection's active key so a successor may activate, and the
-- unique key so the next enqueue with it is accepted (Work.UniqueKey). The caller
-- promotes lane followers in the same transaction. run_after becomes the
-- terminal time (every terminal transition sets it): the row's entries in
-- idx_work_item_claim and idx_work_item_due are rewritten for the state
-- change anyway, and a terminal state's range of idx_work_item_due is then in
-- terminal order, which the dead-letter read path pages through
-- (deadletter.sql).
UPDATE work_item
SET state = sqlc.arg(terminal_state),
    terminal_at = NOW(6),
    run_after = NOW(6),
    failure_class = sqlc.narg(failure_class),
    failure_summary = sqlc.narg(failure_summary),
    projection_active_key = NULL,
    unique_live_key = NULL,
    lease_owner = NULL,
    lease_token = lease_token + 1,
    updated_at = NOW(6)
WHERE work_id = sqlc.arg(work_id)
  AND lease_token = sqlc.arg(lease_token)
  AND state = 'processing';

-- name: FinishBatch :execrows
-- Finish for many claimed rows in one statement: a batch point get on the
-- primary key, each row still fenced by its own token: "id:token" must be
-- one of fences, a comma-separated list (FIND_IN_SET: sqlc cannot bind a
-- slice compared with an expression, and a row-value IN cannot be a slice),
-- so a stale entry matches nothing while the rest commit. laneless says
-- which rows the caller is finishing: rows in no lane (autocommit, nothing
-- to promote) or rows in lanes (inside the transaction that promotes their
-- followers); a row of the other kind matches nothing, so a laned row is
-- never finished without its promotion. The caller reads back which ones
-- matched when fewer rows than entries changed. Same terminal columns as
-- Finish.
UPDATE work_item
SET state = sqlc.arg(terminal_state),
    terminal_at = NOW(6),
    run_after = NOW(6),
    failure_class = NULL,
    failure_summary = NULL,
    projection_active_key = NULL,
    unique_live_key = NULL,
    lease_owner = NULL,
    lease_token = lease_token + 1,
    updated_at = NOW(6)
WHERE work_id IN (sqlc.slice(work_ids))
  AND FIND_IN_SET(CONCAT(work_id, ':', lease_token), CAST(sqlc.arg(fences) AS CHAR)) > 0
  AND state = 'processing'
  AND (source_lane_key IS NULL AND target_lane_key IS NULL) = CAST(sqlc.arg(laneless) AS SIGNED);

-- name: FinishExpired :execrows
-- An item whose lease expired with its attempt budget spent (its process
-- died in every attempt, say) goes to dead instead of being reclaimed again,
-- and one whose cancellation was requested goes to skipped (terminal_state
-- says which): a CAS on the token the stale scan saw, as ReclaimCAS, and the
-- same terminal columns as Finish. The caller promotes lane followers in the
-- same transaction, as for every terminal transition.
UPDATE work_item
SET state = sqlc.arg(terminal_state),
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
  AND lease_token = sqlc.arg(lease_token)
  AND state = 'processing'
  AND run_after < NOW(6);

-- name: GetLaneIdentity :one
-- What a finisher needs to promote followers: the row's lanes and position.
-- Point read inside the finishing transaction, after Finish locked the row.
SELECT scope_id, generation, source_lane_key, target_lane_key, lane_ordinal,
       projection_key
FROM work_item
WHERE work_id = sqlc.arg(work_id);

-- name: LeaseStates :many
-- GetLeaseState for a batch (one batch point get): after FinishLanelessBatch
-- changed fewer rows than it was given, or a run's reply was lost, which
-- entries committed (their token plus one, in the state written); and, for
-- an enqueue that repeats a refused event, the state of the items that
-- held the refused unique keys.
SELECT work_id, state, lease_token, cancel_reason
FROM work_item
WHERE work_id IN (sqlc.slice(work_ids));

-- name: GetLeaseState :one
-- A row's state and token by primary key: after a lease-fenced write whose
-- reply was lost, the holder reads this to learn whether its write
-- committed (its token plus one, in the state it wrote) or another owner
-- moved the row on; and a holder whose renewal or give-back matched
-- nothing, whether its cancellation was requested (cancel_reason).
SELECT state, lease_token, safe_retry_count, cancel_reason
FROM work_item
WHERE work_id = sqlc.arg(work_id);
