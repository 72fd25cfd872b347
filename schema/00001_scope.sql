-- +goose NO TRANSACTION
-- A scope is one tenant/pack incarnation: the unit of generation fencing,
-- enqueue ordering and claim scheduling. TiDB commits DDL implicitly, so every
-- migration holds exactly one DDL statement and runs outside a transaction.

-- +goose Up
CREATE TABLE scope (
    -- Opaque, bounded, binary-collated scope identity (tenant + pack). At most
    -- 128 bytes so that every scope-leading index stays far below TiDB's
    -- 3,072-byte key limit.
    scope_id             VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    -- Only work items of this generation are claimable: the generation fence.
    active_generation    BIGINT       NOT NULL DEFAULT 1,
    -- Next enqueue ordinal to hand out. Enqueue reserves a block by updating
    -- this row, which serializes admission per scope and gives lanes a total
    -- FIFO order that does not depend on any host's clock.
    next_enqueue_ordinal BIGINT       NOT NULL DEFAULT 1,
    created_at           DATETIME(6)  NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    updated_at           DATETIME(6)  NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    PRIMARY KEY (scope_id) CLUSTERED
);

-- +goose Down
DROP TABLE scope;
