-- +goose NO TRANSACTION
-- The events a receipt became, recorded in the transaction that marks it
-- materialized (for audit and readback; a fact delivered before under
-- another delivery id lists the existing event). A JSON array of ids.

-- +goose Up
ALTER TABLE ingress_receipt ADD COLUMN event_ids JSON NULL AFTER materialized_at;

-- +goose Down
ALTER TABLE ingress_receipt DROP COLUMN event_ids;
