-- Throughput history (queue_history; see its migration): written by worker
-- processes once a minute from what they counted in memory, read by the
-- dashboard's charts. Nothing here runs on the claim or finish path, and no
-- statement reads work_item.

-- name: RecordHistory :exec
-- One process's counts of one minute and work kind. An upsert on the
-- primary key, which includes the writer, so no two processes touch one
-- row; a writer that flushes the same minute twice (its counts arrived in
-- two parts) adds to its row.
INSERT INTO queue_history (scope_id, minute_at, queue_class, work_type, writer, completed, failed, dead, max_due_ms)
VALUES (sqlc.arg(scope_id), sqlc.arg(minute_at), sqlc.arg(queue_class), sqlc.arg(work_type), sqlc.arg(writer),
        sqlc.arg(completed), sqlc.arg(failed), sqlc.arg(dead), sqlc.arg(max_due_ms))
ON DUPLICATE KEY UPDATE completed = completed + VALUES(completed),
                        failed = failed + VALUES(failed),
                        dead = dead + VALUES(dead),
                        max_due_ms = GREATEST(max_due_ms, VALUES(max_due_ms));

-- name: HistorySince :many
-- A scope's history from since on: the scope's primary-key range from that
-- minute, summed over writers. Rows read are minutes x kinds x writers of
-- the window (bounded by the window and the process count), never items.
-- The limit cuts a window with more rows than a chart draws at its old
-- end (the range is read newest first); writer_rows adding up to it tells
-- the caller the window was cut, and its oldest minute may be partial.
SELECT h.minute_at, h.queue_class, h.work_type,
       CAST(SUM(h.completed) AS SIGNED) AS completed, CAST(SUM(h.failed) AS SIGNED) AS failed,
       CAST(SUM(h.dead) AS SIGNED) AS dead, CAST(MAX(h.max_due_ms) AS SIGNED) AS max_due_ms,
       COUNT(*) AS writer_rows
FROM (SELECT minute_at, queue_class, work_type, completed, failed, dead, max_due_ms
      FROM queue_history
      WHERE scope_id = sqlc.arg(scope_id)
        AND minute_at >= sqlc.arg(since)
      ORDER BY minute_at DESC
      LIMIT ?) h
GROUP BY h.minute_at, h.queue_class, h.work_type
ORDER BY h.minute_at, h.queue_class, h.work_type;

-- name: PruneHistory :execrows
-- Deletes up to LIMIT rows of the scope older than before: the front of
-- the scope's primary-key range. Writers run it after a flush, rarely.
DELETE FROM queue_history
WHERE scope_id = sqlc.arg(scope_id)
  AND minute_at < sqlc.arg(before)
LIMIT ?;
