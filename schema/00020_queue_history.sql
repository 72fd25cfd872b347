-- +goose NO TRANSACTION
-- Throughput history for operators (the dashboard's charts,
-- inspect.Reader.History): per scope, minute, queue class and work type,
-- the attempts a worker process finished (completed or skipped, failed and
-- due again, dead) and the longest any item it claimed had been due, by
-- the database clock (the oldest due age as its claims saw it: claims take
-- due order). Each process writes only its own rows (writer), once a
-- minute and only for minutes it did something in (runtime/worker), so no
-- two processes write one row and an idle process writes nothing; readers
-- sum over writers. Nothing on the claim or finish path reads it. Rows
-- older than the writers' retention are deleted by the writers, a bounded
-- batch at a time. Small: it grows with minutes x kinds x processes kept,
-- never with items.

-- +goose Up
CREATE TABLE queue_history (
    scope_id     VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_0900_bin NOT NULL,
    -- The UTC minute the counts fall in, by the writing process's clock.
    minute_at    DATETIME     NOT NULL,
    queue_class  VARCHAR(32)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    work_type    VARCHAR(64)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    writer       VARCHAR(64)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    completed    INT          NOT NULL DEFAULT 0,
    failed       INT          NOT NULL DEFAULT 0,
    dead         INT          NOT NULL DEFAULT 0,
    max_due_ms   BIGINT       NOT NULL DEFAULT 0,
    PRIMARY KEY (scope_id, minute_at, queue_class, work_type, writer) CLUSTERED
);

-- +goose Down
DROP TABLE queue_history;
