-- +goose NO TRANSACTION
-- A projection's queued successor (seed 004 step 3): the one generation
-- waiting, inactive, for the claimed generation to terminalize. It sets
-- projection_queued_key (the projection's key) and leaves
-- projection_active_key NULL; the terminal handoff moves the key from one
-- column to the other in the finishing transaction. Its unique key is the
-- next migration.

-- +goose Up
ALTER TABLE work_item ADD COLUMN projection_queued_key VARCHAR(255) COLLATE utf8mb4_0900_bin NULL;

-- +goose Down
ALTER TABLE work_item DROP COLUMN projection_queued_key;
