-- +goose NO TRANSACTION
-- The (queue class, work type) pairs a scope has ever been given work of,
-- written by enqueue the first time a process sees a pair. Workers compare it
-- with what their executors serve, so work of a class that no executor shape
-- claims is reported at start-up instead of silently blocking its lanes.
-- Small: it grows with distinct pairs, never with items.

-- +goose Up
CREATE TABLE scope_work_kind (
    scope_id      VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_0900_bin NOT NULL,
    queue_class   VARCHAR(32)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    work_type     VARCHAR(64)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    first_seen_at DATETIME(6)  NOT NULL,
    PRIMARY KEY (scope_id, queue_class, work_type) CLUSTERED
);

-- +goose Down
DROP TABLE scope_work_kind;
