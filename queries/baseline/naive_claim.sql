-- name: NaiveClaimNext :one
-- The naive claim laneq is measured against (benchmarks only; laneq never
-- runs it): lock the first due pending row of the scope in due order. Every
-- claim leaves an MVCC delete marker at the front of this range, which every
-- later scan steps over until GC, and concurrent claimers queue on the same
-- head row lock. TiDB ignores SKIP LOCKED, so it cannot help.
SELECT work_id
FROM work_item
WHERE scope_id = sqlc.arg(scope_id)
  AND generation = sqlc.arg(generation)
  AND state = 'pending'
  AND run_after <= NOW(6)
ORDER BY run_after, work_id
LIMIT 1
FOR UPDATE;

-- name: NaiveMarkProcessing :exec
UPDATE work_item
SET state = 'processing',
    lease_token = lease_token + 1,
    attempt_count = attempt_count + 1,
    run_after = DATE_ADD(NOW(6), INTERVAL 30 SECOND)
WHERE work_id = sqlc.arg(work_id);

-- name: NaiveComplete :exec
UPDATE work_item
SET state = 'completed',
    terminal_at = NOW(6),
    lease_token = lease_token + 1
WHERE work_id = sqlc.arg(work_id);

-- name: FloorMarkProcessingBatch :execrows
-- NaiveMarkProcessing for many rows in one statement (a batch point get on
-- the primary key): with FloorCompleteBatch, the batched floor, the row and
-- index writes of a claim and a finish with no statement or commit paid per
-- item. No queue writes less per item than this.
UPDATE work_item
SET state = 'processing',
    lease_token = lease_token + 1,
    attempt_count = attempt_count + 1,
    run_after = DATE_ADD(NOW(6), INTERVAL 30 SECOND)
WHERE work_id IN (sqlc.slice(work_ids));

-- name: FloorCompleteBatch :execrows
-- NaiveComplete for many rows in one statement; see FloorMarkProcessingBatch.
UPDATE work_item
SET state = 'completed',
    terminal_at = NOW(6),
    lease_token = lease_token + 1
WHERE work_id IN (sqlc.slice(work_ids));
