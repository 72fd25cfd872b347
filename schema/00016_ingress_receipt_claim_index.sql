-- +goose NO TRANSACTION
-- The receipt router's claim path: one (scope, class, status) range in due
-- order, read from the front and stopped at a limit (see
-- queries/receipt.sql ReceiptCandidates and NextReceiptDue). Replaces the
-- class-less route index (dropped by 00017).

-- +goose Up
ALTER TABLE ingress_receipt
    ADD INDEX idx_ingress_receipt_claim (scope_id, route_class, router_status, next_attempt_at, receipt_id);

-- +goose Down
ALTER TABLE ingress_receipt DROP INDEX idx_ingress_receipt_claim;
