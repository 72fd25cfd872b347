-- +goose NO TRANSACTION
-- The immutable fact ledger. Nothing in laneq updates an event row after it is
-- inserted: executable state lives only on work_item.
--
-- Identities are utf8mb4_0900_bin, a NO PAD binary collation: keys that
-- differ by a trailing space are different keys (utf8mb4_bin is PAD SPACE).

-- +goose Up
CREATE TABLE event (
    event_id          BIGINT       NOT NULL AUTO_RANDOM,
    -- The receipt this event was materialized from; NULL for direct enqueue.
    receipt_id        BIGINT       NULL,
    scope_id          VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_0900_bin NOT NULL,
    -- Scope generation snapshot at materialization.
    generation        BIGINT       NOT NULL,
    route_id          VARCHAR(128) COLLATE utf8mb4_0900_bin NOT NULL,
    route_version     BIGINT       NOT NULL,
    event_kind        VARCHAR(128) COLLATE utf8mb4_0900_bin NOT NULL,
    source_kind       VARCHAR(128) COLLATE utf8mb4_0900_bin NOT NULL,
    source_id         VARCHAR(255) COLLATE utf8mb4_0900_bin NOT NULL,
    -- Provider-supplied order within a delivery (0 when the provider has none).
    delivery_sequence BIGINT       NOT NULL DEFAULT 0,
    -- Scope-wide admission order, reserved from scope.next_enqueue_ordinal.
    enqueue_ordinal   BIGINT       NOT NULL,
    -- Replay and duplicate-delivery identity, unique within the scope.
    idempotency_key   VARCHAR(255) COLLATE utf8mb4_0900_bin NOT NULL,
    payload_hash      BINARY(32)   NOT NULL,
    payload           MEDIUMBLOB   NOT NULL,
    created_at        DATETIME(6)  NOT NULL,
    PRIMARY KEY (event_id) CLUSTERED,
    UNIQUE KEY uk_event_idempotency (scope_id, idempotency_key),
    KEY idx_event_receipt (receipt_id),
    -- Source-order reads (projection input ranges, replay identity checks).
    KEY idx_event_source (scope_id, source_kind, source_id, enqueue_ordinal)
);

-- +goose Down
DROP TABLE event;
