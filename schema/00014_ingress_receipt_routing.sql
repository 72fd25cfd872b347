-- +goose NO TRANSACTION
-- Receipt routing (issue 11). A receipt carries the route class its
-- resolver gave it at admission: the router claims each class from its own
-- index range, so interactive receipts never queue behind a bulk burst's
-- receipts (seed 004's SC400 record: one ordered router, 787 s at p50).
-- The claim index leads with (scope, class, status) and orders by due time;
-- it replaces the class-less route index. event_ids records, in the same
-- transaction that marks the receipt materialized, the events it became
-- (for audit and readback; a duplicate fact lists the existing event).

-- +goose Up
ALTER TABLE ingress_receipt
    ADD COLUMN route_class VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_0900_bin NOT NULL DEFAULT 'default' AFTER correlation_id;
ALTER TABLE ingress_receipt
    ADD COLUMN event_ids JSON NULL AFTER materialized_at;
ALTER TABLE ingress_receipt
    ADD INDEX idx_ingress_receipt_claim (scope_id, route_class, router_status, next_attempt_at, receipt_id);
ALTER TABLE ingress_receipt
    DROP INDEX idx_ingress_receipt_route;

-- +goose Down
ALTER TABLE ingress_receipt
    ADD INDEX idx_ingress_receipt_route (scope_id, router_status, next_attempt_at, receipt_id);
ALTER TABLE ingress_receipt
    DROP INDEX idx_ingress_receipt_claim;
ALTER TABLE ingress_receipt
    DROP COLUMN event_ids;
ALTER TABLE ingress_receipt
    DROP COLUMN route_class;
