-- +goose NO TRANSACTION
-- Receipt routing (issue 11). A receipt carries the route class its
-- resolver gave it at admission: the router claims each class from its own
-- index range (00016), so interactive receipts never queue behind a bulk
-- burst's receipts (seed 004's SC400 record: one ordered router, 787 s at
-- p50). A key column: NO PAD, like every identity.

-- +goose Up
ALTER TABLE ingress_receipt
    ADD COLUMN route_class VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_0900_bin NOT NULL DEFAULT 'default' AFTER correlation_id;

-- +goose Down
ALTER TABLE ingress_receipt DROP COLUMN route_class;
