-- +goose NO TRANSACTION
-- Durable provider admission. A delivery is acknowledged only after this row
-- commits; the row then owns receipt-router state (claim, retry, lease) until
-- its events are materialized. It never owns executor state.
--
-- Identities are utf8mb4_0900_bin, a NO PAD binary collation: keys that
-- differ by a trailing space are different keys (utf8mb4_bin is PAD SPACE).
-- Times are UTC, written as NOW(6) by the statements (see work_item).

-- +goose Up
CREATE TABLE ingress_receipt (
    receipt_id          BIGINT       NOT NULL AUTO_RANDOM,
    scope_id            VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_0900_bin NOT NULL,
    -- Provider delivery identity; a redelivery with the same id is the same receipt.
    delivery_id         VARCHAR(255) COLLATE utf8mb4_0900_bin NOT NULL,
    -- Verified request envelope, enough to resume routing after a restart.
    http_method         VARCHAR(16)  NOT NULL,
    route_key           VARCHAR(255) COLLATE utf8mb4_0900_bin NOT NULL,
    content_type        VARCHAR(255) NOT NULL,
    event_kind          VARCHAR(128) COLLATE utf8mb4_0900_bin NULL,
    correlation_id      VARCHAR(255) NULL,
    payload_hash        BINARY(32)   NOT NULL,
    body                MEDIUMBLOB   NOT NULL,
    received_at         DATETIME(6)  NOT NULL,
    accepted_at         DATETIME(6)  NOT NULL,
    -- Receipt-router state: pending -> routing -> materialized | failed.
    router_status       VARCHAR(16)  NOT NULL DEFAULT 'pending',
    attempt_count       INT          NOT NULL DEFAULT 0,
    next_attempt_at     DATETIME(6)  NOT NULL,
    claim_owner         VARCHAR(128) COLLATE utf8mb4_0900_bin NULL,
    -- Fencing token: bumped by every router claim; a stale router loses its CAS.
    claim_token         BIGINT       NOT NULL DEFAULT 0,
    lease_until         DATETIME(6)  NULL,
    last_error_class    VARCHAR(64)  NULL,
    -- Sanitized: never a payload, credential or token.
    last_error_summary  VARCHAR(1024) NULL,
    materialized_at     DATETIME(6)  NULL,
    created_at          DATETIME(6)  NOT NULL,
    updated_at          DATETIME(6)  NOT NULL,
    PRIMARY KEY (receipt_id) CLUSTERED,
    UNIQUE KEY uk_ingress_receipt_delivery (scope_id, delivery_id),
    -- Router claim path: due receipts of one scope in due order.
    KEY idx_ingress_receipt_route (scope_id, router_status, next_attempt_at, receipt_id)
);

-- +goose Down
DROP TABLE ingress_receipt;
