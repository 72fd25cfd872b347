-- Source projection (seed 004's latest_by_source mode; see
-- workqueue.Work.Projection). All generations of one projection share
-- projection_key. The active generation (at most one: the unique
-- uk_work_item_projection_active) also sets projection_active_key; a queued
-- successor (at most one: uk_work_item_projection_queued) sets
-- projection_queued_key instead and is 'inactive', a state no claim, lane or
-- due-time statement reads, so it neither runs nor blocks its lane until the
-- terminal handoff (ActivateQueuedProjections) makes it active.

-- name: LockActiveProjections :many
-- The active generations of an enqueue batch's projections, read current
-- and locked (batch point gets on uk_work_item_projection_active), after the
-- batch's events and work items and before its lane rows: enqueue's lock
-- order. The lock serializes the advance against a claim's CAS and a
-- finisher's handoff: whichever commits first, the other sees its result.
SELECT work_id, event_id, state, attempt_count, replay_of_work_id, projection_active_key
FROM work_item
WHERE projection_active_key IN (sqlc.slice(projection_keys))
FOR UPDATE;

-- name: LockQueuedProjections :many
-- The queued successors of an enqueue batch's projections, as
-- LockActiveProjections (batch point gets on uk_work_item_projection_queued).
SELECT work_id, event_id, state, projection_queued_key
FROM work_item
WHERE projection_queued_key IN (sqlc.slice(projection_keys))
FOR UPDATE;

-- name: AdvanceProjections :execrows
-- Points unclaimed generations (an active one never claimed, or a queued
-- successor) at the newest event of their projection: one statement for a
-- whole batch, by primary key (batch point gets), each row taking the event
-- at its own position in the list (FIELD finds the position, ELT picks the
-- event id there; both lists come in the same order, as decimal text: FIELD
-- compares a number with strings as doubles, which cannot tell 64-bit
-- AUTO_RANDOM ids apart, so the id is compared as text). The generation keeps
-- its lane place, readiness and lease token: only its input grows, and the
-- replaced event stays in its input range (ProjectionInput). The state
-- condition is a guard: the caller holds these rows locked and read them in
-- these states; it checks that every row matched.
UPDATE work_item
SET event_id = CAST(ELT(FIELD(CAST(work_id AS CHAR), sqlc.slice(work_id_list)), sqlc.slice(event_id_list)) AS SIGNED),
    updated_at = NOW(6)
WHERE work_id IN (sqlc.slice(work_ids))
  AND state IN ('pending', 'blocked', 'inactive')
  AND attempt_count = 0;

-- name: ActivateQueuedProjections :execrows
-- The terminal handoff: in the transaction that terminalized the claimed
-- generations of these projections (Finish, FinishBatch or FinishExpired
-- cleared their active keys), their queued successors become active and
-- enter their lanes as blocked rows; the caller then promotes lane followers
-- as every finish does, which finds a successor in its ordinal place. Batch
-- point gets on uk_work_item_projection_queued. run_after moves to at least
-- now, as every transition toward claimable does (the claim cursor's floor).
UPDATE work_item
SET projection_active_key = projection_queued_key,
    projection_queued_key = NULL,
    state = 'blocked',
    run_after = GREATEST(run_after, NOW(6)),
    updated_at = NOW(6)
WHERE projection_queued_key IN (sqlc.slice(projection_keys))
  AND state = 'inactive';

-- name: PreviousProjectionEvent :many
-- The boundary of a generation's input: the event the projection's
-- previous generation selected (the newest generation admitted before this
-- one that selected another event: generations of one projection run one
-- after another, so that one was executed, or is terminal; a replay child
-- selects its parent's event, so its replayed ancestors are skipped and it
-- runs its parent's input again). A backward range on idx_work_item_projection,
-- which holds event_id, stopped by LIMIT 1 after one entry however long the
-- projection's history: no table read, and no join (joined with event,
-- TiDB read every earlier generation before applying the LIMIT). No row:
-- the generation is the projection's first. EventOrdinal then reads the
-- event's admission ordinal.
SELECT w.event_id
FROM work_item w
WHERE w.projection_key = sqlc.arg(projection_key)
  AND w.lane_ordinal < sqlc.arg(lane_ordinal)
  AND w.event_id <> sqlc.arg(selected_event_id)
ORDER BY w.lane_ordinal DESC
LIMIT 1;

-- name: EventOrdinal :one
-- An event's admission ordinal: a primary-key point get that leaves the
-- payload unread.
SELECT enqueue_ordinal
FROM event
WHERE event_id = sqlc.arg(event_id);

-- name: NewestProjectionGeneration :one
-- The projection's newest generation (Replay's safety check, under the
-- scope lock that serializes it with every enqueue): the last entry of the
-- projection's range on idx_work_item_projection, index only.
SELECT w.work_id
FROM work_item w
WHERE w.projection_key = sqlc.arg(projection_key)
ORDER BY w.lane_ordinal DESC
LIMIT 1;

-- name: ProjectionInput :many
-- A projection generation's input: its projection's events after the
-- previous generation's selected event through its own, in admission order:
-- one range on idx_event_projection, whatever else the scope holds. LIMIT
-- pages a long range (the caller continues after the last ordinal). Every
-- column, as GetEvent reads them (sqlc.embed): one row mapper for every
-- statement that reads events; the payload makes each row a table read
-- anyway, so the four extra columns cost nothing more.
SELECT sqlc.embed(e)
FROM event e
WHERE e.projection_key = sqlc.arg(projection_key)
  AND e.enqueue_ordinal > sqlc.arg(after_ordinal)
  AND e.enqueue_ordinal <= sqlc.arg(through_ordinal)
ORDER BY e.enqueue_ordinal
LIMIT ?;
