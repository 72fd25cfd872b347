-- Statistics (runtime/stats): what a claimer of one scope, generation and
-- queue class would see, counted with the claim path's own filter (the
-- work-type list) and clock (db_now from GetScope, the instant a claim turn
-- bounds its scans by). Every statement reads idx_work_item_claim
-- (scope_id, generation, queue_class, state, run_after, ..., work_type) one
-- state range at a time: terminal history (completed, skipped) is other
-- ranges and is never read, and the work-type filter runs on the index.
--
-- The buckets, as claim decides them: pending rows are lane heads (their
-- followers are blocked), claimable once run_after <= db_now; processing
-- rows hold a lease until run_after and are reclaimable after it;
-- dependency_registration and waiting_dependency rows wait on a dependency;
-- inactive rows are projection successors waiting for the active
-- generation to finish; dead rows are terminal failures (replayable).

-- name: ClassStatsExact :many
-- Exact per-state counts of one class: every live and dead row of the
-- class's ranges is read, so its cost is the class's backlog (a
-- diagnostic, not something to call in a loop; ClassStatsCapped is). Index
-- only: state, run_after and work_type are index columns, so the due and
-- expired splits and the first run_after need no row lookup.
-- first_run_after_micros is the state's earliest run_after relative to
-- db_now (negative: that long overdue; 0 when the state has no row): a
-- duration, so no session time zone can shift it.
SELECT w.state,
       COUNT(*) AS total,
       CAST(COALESCE(SUM(w.run_after <= sqlc.arg(db_now)), 0) AS SIGNED) AS at_or_past_run_after,
       CAST(COALESCE(TIMESTAMPDIFF(MICROSECOND, sqlc.arg(db_now), MIN(w.run_after)), 0) AS SIGNED) AS first_run_after_micros
FROM work_item w
WHERE w.scope_id = sqlc.arg(scope_id)
  AND w.generation = sqlc.arg(generation)
  AND w.queue_class = sqlc.arg(queue_class)
  AND w.state IN ('pending', 'blocked', 'processing', 'dependency_registration', 'waiting_dependency', 'inactive', 'dead')
  AND w.work_type IN (sqlc.slice(work_types))
GROUP BY w.state;

-- name: ClassRetryingExact :one
-- Not-due pending rows that were claimed before (attempt_count > 0): retries
-- in backoff, told apart from delayed enqueues. attempt_count is not an
-- index column, so each not-due row is looked up: the cost is the class's
-- not-due backlog. Exact statistics only. The index is forced: costing a
-- lookup per row, TiDB chose a full table scan (every scope, class and
-- terminal row) once the not-due range was a large part of the table.
SELECT COUNT(*) AS total
FROM work_item w FORCE INDEX (idx_work_item_claim)
WHERE w.scope_id = sqlc.arg(scope_id)
  AND w.generation = sqlc.arg(generation)
  AND w.queue_class = sqlc.arg(queue_class)
  AND w.state = 'pending'
  AND w.run_after > sqlc.arg(db_now)
  AND w.work_type IN (sqlc.slice(work_types))
  AND w.attempt_count > 0;

-- name: ClassStatsCapped :many
-- Cheap per-bucket counts of one class, each arm counting at most 1,001
-- entries of one index range (1,001: the runtime reports "more than 1,000",
-- stats.CapCount), so a call costs the same at any backlog and is safe to
-- make often. (TiDB's paging reads pages of growing size, so an arm past
-- its cap reads up to 2,048 entries, never more.) Each arm's
-- MIN(run_after) is the range's first entry (the index is in run_after
-- order), so the oldest due row and the oldest expired lease are exact even
-- when the count is capped (not for the two-state dependency arm, whose
-- entries are not in one order).
SELECT 'due' AS bucket, COUNT(*) AS total, CAST(COALESCE(TIMESTAMPDIFF(MICROSECOND, sqlc.arg(db_now), MIN(c.run_after)), 0) AS SIGNED) AS first_run_after_micros
FROM (SELECT w.run_after FROM work_item w
      WHERE w.scope_id = sqlc.arg(scope_id) AND w.generation = sqlc.arg(generation)
        AND w.queue_class = sqlc.arg(queue_class) AND w.state = 'pending'
        AND w.run_after <= sqlc.arg(db_now) AND w.work_type IN (sqlc.slice(work_types))
      ORDER BY w.run_after LIMIT 1001) c
UNION ALL
SELECT 'not_due', COUNT(*), CAST(COALESCE(TIMESTAMPDIFF(MICROSECOND, sqlc.arg(db_now), MIN(c.run_after)), 0) AS SIGNED)
FROM (SELECT w.run_after FROM work_item w
      WHERE w.scope_id = sqlc.arg(scope_id) AND w.generation = sqlc.arg(generation)
        AND w.queue_class = sqlc.arg(queue_class) AND w.state = 'pending'
        AND w.run_after > sqlc.arg(db_now) AND w.work_type IN (sqlc.slice(work_types))
      ORDER BY w.run_after LIMIT 1001) c
UNION ALL
SELECT 'expired_leases', COUNT(*), CAST(COALESCE(TIMESTAMPDIFF(MICROSECOND, sqlc.arg(db_now), MIN(c.run_after)), 0) AS SIGNED)
FROM (SELECT w.run_after FROM work_item w
      WHERE w.scope_id = sqlc.arg(scope_id) AND w.generation = sqlc.arg(generation)
        AND w.queue_class = sqlc.arg(queue_class) AND w.state = 'processing'
        AND w.run_after <= sqlc.arg(db_now) AND w.work_type IN (sqlc.slice(work_types))
      ORDER BY w.run_after LIMIT 1001) c
UNION ALL
SELECT 'leased', COUNT(*), CAST(COALESCE(TIMESTAMPDIFF(MICROSECOND, sqlc.arg(db_now), MIN(c.run_after)), 0) AS SIGNED)
FROM (SELECT w.run_after FROM work_item w
      WHERE w.scope_id = sqlc.arg(scope_id) AND w.generation = sqlc.arg(generation)
        AND w.queue_class = sqlc.arg(queue_class) AND w.state = 'processing'
        AND w.run_after > sqlc.arg(db_now) AND w.work_type IN (sqlc.slice(work_types))
      ORDER BY w.run_after LIMIT 1001) c
UNION ALL
SELECT 'lane_blocked', COUNT(*), CAST(COALESCE(TIMESTAMPDIFF(MICROSECOND, sqlc.arg(db_now), MIN(c.run_after)), 0) AS SIGNED)
FROM (SELECT w.run_after FROM work_item w
      WHERE w.scope_id = sqlc.arg(scope_id) AND w.generation = sqlc.arg(generation)
        AND w.queue_class = sqlc.arg(queue_class) AND w.state = 'blocked'
        AND w.work_type IN (sqlc.slice(work_types))
      ORDER BY w.run_after LIMIT 1001) c
UNION ALL
SELECT 'waiting_dependency', COUNT(*), CAST(COALESCE(TIMESTAMPDIFF(MICROSECOND, sqlc.arg(db_now), MIN(c.run_after)), 0) AS SIGNED)
FROM (SELECT w.run_after FROM work_item w
      WHERE w.scope_id = sqlc.arg(scope_id) AND w.generation = sqlc.arg(generation)
        AND w.queue_class = sqlc.arg(queue_class)
        AND w.state IN ('dependency_registration', 'waiting_dependency')
        AND w.work_type IN (sqlc.slice(work_types))
      LIMIT 1001) c
UNION ALL
SELECT 'inactive_successors', COUNT(*), CAST(COALESCE(TIMESTAMPDIFF(MICROSECOND, sqlc.arg(db_now), MIN(c.run_after)), 0) AS SIGNED)
FROM (SELECT w.run_after FROM work_item w
      WHERE w.scope_id = sqlc.arg(scope_id) AND w.generation = sqlc.arg(generation)
        AND w.queue_class = sqlc.arg(queue_class) AND w.state = 'inactive'
        AND w.work_type IN (sqlc.slice(work_types))
      ORDER BY w.run_after LIMIT 1001) c
UNION ALL
SELECT 'dead', COUNT(*), CAST(COALESCE(TIMESTAMPDIFF(MICROSECOND, sqlc.arg(db_now), MIN(c.run_after)), 0) AS SIGNED)
FROM (SELECT w.run_after FROM work_item w
      WHERE w.scope_id = sqlc.arg(scope_id) AND w.generation = sqlc.arg(generation)
        AND w.queue_class = sqlc.arg(queue_class) AND w.state = 'dead'
        AND w.work_type IN (sqlc.slice(work_types))
      ORDER BY w.run_after LIMIT 1001) c;

-- name: AnyLiveWork :many
-- "Is this scope drained?": at most one live row of the active generation,
-- any class and work type. idx_work_item_due (scope_id, generation, state,
-- ...) gives one range per live state, so LIMIT 1 stops at the first entry
-- and terminal history is never read.
SELECT w.work_id, w.state
FROM work_item w
WHERE w.scope_id = sqlc.arg(scope_id)
  AND w.generation = sqlc.arg(generation)
  AND w.state IN ('pending', 'blocked', 'processing', 'dependency_registration', 'waiting_dependency', 'inactive')
LIMIT 1;
