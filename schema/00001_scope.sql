-- +goose NO TRANSACTION
-- A scope is one tenant/pack incarnation: the unit of generation fencing,
-- enqueue ordering and claim scheduling. TiDB commits DDL implicitly, so every
-- migration holds exactly one DDL statement and runs outside a transaction.

-- +goose Up
CREATE TABLE scope (
    -- Opaque, bounded scope identity (tenant + pack): printable ASCII, at most
    -- 128 characters (checked by the runtime), so every scope-leading index
    -- stays far below TiDB's 3,072-byte key limit. utf8mb4_0900_bin is a NO
    -- PAD binary collation: 't' and 't ' are two scopes (ascii_bin and
    -- utf8mb4_bin are PAD SPACE and would merge them).
    scope_id             VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_0900_bin NOT NULL,
    -- Only work items of this generation are claimable: the generation fence.
    active_generation    BIGINT       NOT NULL DEFAULT 1,
    -- Next enqueue ordinal to hand out. Enqueue reserves a block by updating
    -- this row, which serializes admission per scope and gives lanes a total
    -- FIFO order that does not depend on any host's clock.
    next_enqueue_ordinal BIGINT       NOT NULL DEFAULT 1,
    -- Database time (UTC) of the last enqueue's final statement, just before
    -- it committed. Every later enqueue's items are due no earlier than this,
    -- so a claimer that sees the ordinal move knows how far back the newly
    -- committed items can sit (see ClaimCandidates).
    admitted_at          DATETIME(6)  NOT NULL DEFAULT '1970-01-01 00:00:00',
    -- Times are UTC, written as NOW(6) by the statement that writes the row
    -- (workqueue.New refuses sessions whose time zone is not UTC), so no
    -- column default can store another session's local time.
    created_at           DATETIME(6)  NOT NULL,
    updated_at           DATETIME(6)  NOT NULL,
    PRIMARY KEY (scope_id) CLUSTERED
);

-- +goose Down
DROP TABLE scope;
