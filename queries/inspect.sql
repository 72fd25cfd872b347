-- Operator reads (runtime/inspect): the dead-letter read path and one item's
-- state and history. Context only, never a payload or a receipt body: an
-- event's payload and a delivery's body can hold personal data and
-- credentials, and failure summaries are sanitized when they are written.

-- name: DeadLetterPage :many
-- One page of a scope generation's dead items, newest first, with their
-- event's and receipt's context. The page is cut on the index before any
-- row is read: the inner select reads at most LIMIT entries of the
-- (scope, generation, 'dead') range of idx_work_item_due backwards from the
-- cursor (terminal transitions set run_after to the terminal time, so the
-- range is in terminal order; rows that died before that rule carry their
-- last lease end instead), and only those entries are point-read with their
-- event and receipt. The filters are reported per row (matches) instead of
-- applied in WHERE, so the caller learns where the scan stopped even when
-- nothing on the page matched: a page costs LIMIT lookups, however selective
-- the filters are.
-- The joins are index joins by hint, as in ItemDetail.
SELECT /*+ INL_JOIN(w, e, r) */ w.work_id, w.event_id, w.work_type, w.queue_class, w.attempt_count,
       w.failure_class, w.failure_summary, k.run_after AS dead_at, w.terminal_at,
       w.replayed_at, w.replay_depth, w.replay_of_work_id,
       w.source_lane_key, w.target_lane_key, w.projection_key,
       e.route_id, e.route_version, e.event_kind, e.source_kind, e.source_id,
       e.idempotency_key, e.receipt_id, r.delivery_id, r.route_key, r.correlation_id,
       CAST((sqlc.arg(work_type) = '' OR w.work_type = sqlc.arg(work_type))
            AND (sqlc.arg(failure_class) = '' OR w.failure_class = sqlc.arg(failure_class)) AS SIGNED) AS matches
FROM (SELECT d.work_id, d.run_after
      FROM work_item d
      WHERE d.scope_id = sqlc.arg(scope_id)
        AND d.generation = sqlc.arg(generation)
        AND d.state = 'dead'
        AND d.run_after >= sqlc.arg(from_time)
        AND (d.run_after < sqlc.arg(before_time)
             OR (d.run_after = sqlc.arg(before_time) AND d.work_id < sqlc.arg(before_work_id)))
      ORDER BY d.run_after DESC, d.work_id DESC
      LIMIT ?) k
JOIN work_item w ON w.work_id = k.work_id
JOIN event e ON e.event_id = w.event_id
LEFT JOIN ingress_receipt r ON r.receipt_id = e.receipt_id
ORDER BY k.run_after DESC, k.work_id DESC;

-- name: ItemDetail :one
-- One work item with its event's and receipt's context and the database's
-- clock (for due and lease times relative to now): primary-key point gets,
-- index joins by hint (with a two-row table beside it, TiDB once chose a
-- full scan and a hash join). The scope's active generation is a separate
-- point read (GetScope): joined here, the tiny scope table drew the same
-- full scan.
SELECT /*+ INL_JOIN(e, r) */ w.work_id, w.event_id, w.scope_id, w.generation, w.work_type, w.queue_class,
       w.state, w.run_after, w.priority, w.attempt_count, w.safe_retry_count,
       w.lease_owner, w.lease_token, w.source_lane_key, w.target_lane_key, w.lane_ordinal,
       w.projection_key, w.projection_active_key, w.projection_queued_key,
       w.dependency_wake_key, w.dependency_keys, w.terminal_at, w.failure_class, w.failure_summary,
       w.replay_of_work_id, w.replayed_at, w.replay_depth, w.created_at, w.updated_at,
       e.route_id, e.route_version, e.event_kind, e.source_kind, e.source_id,
       e.idempotency_key, e.receipt_id, e.created_at AS event_created_at,
       r.delivery_id, r.route_key, r.correlation_id, r.accepted_at AS receipt_accepted_at,
       CAST(NOW(6) AS DATETIME(6)) AS db_now
FROM work_item w
JOIN event e ON e.event_id = w.event_id
LEFT JOIN ingress_receipt r ON r.receipt_id = e.receipt_id
WHERE w.work_id = sqlc.arg(work_id);

-- name: ReplayChain :many
-- An item's history across replays: every work item of its event and work
-- type (the original at depth 0, each replay one deeper), in depth order.
-- A prefix range of uk_work_item_event_type, as long as the replay count.
SELECT work_id, state, replay_depth, attempt_count, failure_class, failure_summary,
       terminal_at, replayed_at, created_at
FROM work_item
WHERE event_id = sqlc.arg(event_id)
  AND work_type = sqlc.arg(work_type)
ORDER BY replay_depth;

-- name: ListScopes :many
-- The scopes, a page at a time in key order after a cursor (the dashboard's
-- first page): a range of the clustered primary key, LIMIT rows. The paused
-- classes come with each row, so the page marks paused scopes without a
-- read per scope.
SELECT scope_id, active_generation, admitted_at, created_at, paused_classes
FROM scope
WHERE scope_id > sqlc.arg(after_scope_id)
ORDER BY scope_id
LIMIT ?;

-- name: LaneQueues :many
-- Why an item is not running: how many rows wait blocked in its source lane
-- and in its target lane (behind that lane's head), each counted up to
-- 1,001 (inspect says "more than 1,000"). Each arm is one range of its lane
-- index (state before the ordinal: the lane's blocked rows are one range)
-- cut by its LIMIT, index only, so a lane of 10,000 followers reads 1,001
-- entries (TiDB's paging: at most 2,048), not 10,000. Derived tables in
-- FROM, not scalar subqueries: TiDB runs an uncorrelated scalar subquery
-- while planning, where EXPLAIN ANALYZE cannot see its reads. A NULL lane
-- key matches nothing and counts 0.
SELECT 'source' AS lane, COUNT(*) AS blocked
FROM (SELECT s.work_id FROM work_item s
      WHERE s.scope_id = sqlc.arg(scope_id) AND s.generation = sqlc.arg(generation)
        AND s.source_lane_key = sqlc.narg(source_lane_key) AND s.state = 'blocked'
      LIMIT 1001) sb
UNION ALL
SELECT 'target', COUNT(*)
FROM (SELECT t.work_id FROM work_item t
      WHERE t.scope_id = sqlc.arg(scope_id) AND t.generation = sqlc.arg(generation)
        AND t.target_lane_key = sqlc.narg(target_lane_key) AND t.state = 'blocked'
      LIMIT 1001) tb;

-- name: ActiveProjectionGeneration :many
-- Why an inactive projection successor is not running: the generation it
-- queues behind, by a point get on uk_work_item_projection_active. Not
-- locking (LockActiveProjections is enqueue's locking form).
SELECT work_id, state, updated_at
FROM work_item
WHERE projection_active_key = sqlc.arg(projection_key);

-- name: SourceLaneHead :many
-- A lane page's head: the source lane's one live row that is not blocked
-- (lane.sql: at most one), by the four head-state ranges of
-- idx_work_item_source_lane, each empty or holding the head, whatever the
-- lane's length. Row lookups for the displayed columns.
SELECT work_id, work_type, queue_class, state, lane_ordinal, run_after, lease_owner, updated_at
FROM work_item
WHERE scope_id = sqlc.arg(scope_id)
  AND generation = sqlc.arg(generation)
  AND source_lane_key = sqlc.arg(lane_key)
  AND state IN ('pending', 'processing', 'dependency_registration', 'waiting_dependency')
ORDER BY lane_ordinal
LIMIT 1;

-- name: TargetLaneHead :many
-- SourceLaneHead for a target lane, on idx_work_item_target_lane.
SELECT work_id, work_type, queue_class, state, lane_ordinal, run_after, lease_owner, updated_at
FROM work_item
WHERE scope_id = sqlc.arg(scope_id)
  AND generation = sqlc.arg(generation)
  AND target_lane_key = sqlc.arg(lane_key)
  AND state IN ('pending', 'processing', 'dependency_registration', 'waiting_dependency')
ORDER BY lane_ordinal
LIMIT 1;

-- name: SourceLaneBlockedPage :many
-- A lane page: the source lane's blocked rows in lane order after a
-- cursor ordinal, one page. The lane's blocked rows are one range of
-- idx_work_item_source_lane (state before the ordinal), read from the
-- cursor and cut by the LIMIT, so a page of a 10,000-row lane costs a page.
SELECT work_id, work_type, queue_class, lane_ordinal, source_lane_key, target_lane_key, created_at
FROM work_item
WHERE scope_id = sqlc.arg(scope_id)
  AND generation = sqlc.arg(generation)
  AND source_lane_key = sqlc.arg(lane_key)
  AND state = 'blocked'
  AND lane_ordinal > sqlc.arg(after_ordinal)
ORDER BY lane_ordinal
LIMIT ?;

-- name: TargetLaneBlockedPage :many
-- SourceLaneBlockedPage for a target lane, on idx_work_item_target_lane.
SELECT work_id, work_type, queue_class, lane_ordinal, source_lane_key, target_lane_key, created_at
FROM work_item
WHERE scope_id = sqlc.arg(scope_id)
  AND generation = sqlc.arg(generation)
  AND target_lane_key = sqlc.arg(lane_key)
  AND state = 'blocked'
  AND lane_ordinal > sqlc.arg(after_ordinal)
ORDER BY lane_ordinal
LIMIT ?;

-- name: ScopeProcesses :many
-- The processes page: a scope's registered worker processes, live and
-- recently expired, with what each says about itself. The scope's
-- primary-key range of wake_endpoint, as long as its process count (rows
-- of processes that died are swept a TTL after they expire), cut at the
-- limit. live compares on the database clock.
SELECT endpoint_id, address, process, registered_at, renewed_at, expires_at,
       CAST(expires_at > NOW(6) AS SIGNED) AS live
FROM wake_endpoint
WHERE scope_id = sqlc.arg(scope_id)
ORDER BY endpoint_id
LIMIT ?;

-- name: LeaseOwnerCounts :many
-- Leases held per claim turn reference in a scope generation: the
-- processing range of idx_work_item_due (live and expired leases), cut at
-- the limit before grouping, so the read is bounded by the limit whatever
-- the backlog (a processing row is a running item or a lease that ran out;
-- there are as many as executors are busy, plus expired ones). The caller
-- folds the references into processes by their owner prefix.
SELECT k.lease_owner, COUNT(*) AS leases, CAST(SUM(k.run_after < NOW(6)) AS SIGNED) AS expired
FROM (SELECT w.lease_owner, w.run_after
      FROM work_item w
      WHERE w.scope_id = sqlc.arg(scope_id)
        AND w.generation = sqlc.arg(generation)
        AND w.state = 'processing'
      ORDER BY w.run_after
      LIMIT ?) k
GROUP BY k.lease_owner;

-- name: UnclaimedPage :many
-- One page of one unclaimed state (pending, blocked, waiting_dependency) of
-- a scope generation, in due order after a cursor (run_after, work_id) and
-- before until_time, for a bulk skip. As DeadLetterPage: the page is cut on
-- idx_work_item_due before any row is read, and the class, work-type and
-- failure-class filters (a retrying item's last failure) are reported per
-- row (matches) instead of applied in WHERE, so a page costs LIMIT lookups
-- however selective the filters are and the caller learns where the scan
-- stopped. Rows a skip moves out of the state leave the range; the cursor
-- passes the rest.
SELECT /*+ INL_JOIN(w) */ w.work_id, k.run_after, w.queue_class, w.work_type,
       CAST((sqlc.arg(queue_class) = '' OR w.queue_class = sqlc.arg(queue_class))
            AND (sqlc.arg(work_type) = '' OR w.work_type = sqlc.arg(work_type))
            AND (sqlc.arg(failure_class) = '' OR w.failure_class = sqlc.arg(failure_class)) AS SIGNED) AS matches
FROM (SELECT d.work_id, d.run_after
      FROM work_item d
      WHERE d.scope_id = sqlc.arg(scope_id)
        AND d.generation = sqlc.arg(generation)
        AND d.state = sqlc.arg(state)
        AND (d.run_after > sqlc.arg(after_time)
             OR (d.run_after = sqlc.arg(after_time) AND d.work_id > sqlc.arg(after_work_id)))
        AND d.run_after < sqlc.arg(until_time)
      ORDER BY d.run_after, d.work_id
      LIMIT ?) k
JOIN work_item w ON w.work_id = k.work_id
ORDER BY k.run_after, k.work_id;
