-- +goose NO TRANSACTION
-- Source projection (seed 004, workqueue.Work.Projection): every event that
-- feeds a projection records the projection's key when it is inserted, and
-- is never changed after (events stay immutable). NULL for events that feed
-- no projection. Its index is the next migration: TiDB does not add a
-- column and an index on it in one ALTER, and each migration is one
-- statement.

-- +goose Up
ALTER TABLE event ADD COLUMN projection_key VARCHAR(255) COLLATE utf8mb4_0900_bin NULL;

-- +goose Down
ALTER TABLE event DROP COLUMN projection_key;
