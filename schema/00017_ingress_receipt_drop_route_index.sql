-- +goose NO TRANSACTION
-- The class-less route index has no reader once the claim index (00016)
-- exists; every receipt write would keep paying for it.

-- +goose Up
ALTER TABLE ingress_receipt DROP INDEX idx_ingress_receipt_route;

-- +goose Down
ALTER TABLE ingress_receipt
    ADD INDEX idx_ingress_receipt_route (scope_id, router_status, next_attempt_at, receipt_id);
