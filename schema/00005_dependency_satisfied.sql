-- +goose NO TRANSACTION
-- Durable dependency facts. A waiting work item is runnable again only when
-- every dependency key it recorded has a row here: this table is the readiness
-- authority, the wake key on work_item is only a hint.

-- +goose Up
CREATE TABLE dependency_satisfied (
    scope_id       VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_0900_bin NOT NULL,
    -- Exact dependency identity: a NO PAD binary collation, so an equality
    -- rides the primary key (a BINARY() cast on a ci column would force a
    -- full scan) and 'k' and 'k ' are different keys.
    dependency_key VARCHAR(255) COLLATE utf8mb4_0900_bin NOT NULL,
    satisfied_at   DATETIME(6)  NOT NULL,
    PRIMARY KEY (scope_id, dependency_key) CLUSTERED
);

-- +goose Down
DROP TABLE dependency_satisfied;
