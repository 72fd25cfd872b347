-- +goose NO TRANSACTION
-- Rate limits across processes (issue 39, runtime/ratelimit): one row per
-- scope, limit and window of the limit (a tenth of its period, or
-- finer), counting the starts granted in it. A process takes a share of
-- a window's budget in one short transaction when its own share runs out
-- and spends it locally, so claims never write this table one by one; the
-- row locks of a window serialize only the processes taking shares of it.
-- window_index is the window's number since the Unix epoch by the
-- database's clock. Rows of past windows are deleted by the takers, a
-- bounded batch at a time.

-- +goose Up
CREATE TABLE rate_window (
    scope_id     VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_0900_bin NOT NULL,
    limit_name   VARCHAR(64)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    window_index BIGINT       NOT NULL,
    granted      INT          NOT NULL DEFAULT 0,
    PRIMARY KEY (scope_id, limit_name, window_index) CLUSTERED
);

-- +goose Down
DROP TABLE rate_window;
