-- +goose NO TRANSACTION
-- What a listening process says about itself, for operators (laneq's
-- processes page; inspect.Reader.Processes): a JSON document with its host,
-- process id, owner, executor count, the classes and work types it serves
-- and the prefix of its lease owners, written
-- at registration and at each renewal (renewed_at). Senders never read it:
-- ListWakeEndpoints selects the columns they need. One statement (TiDB
-- applies both columns as one schema change).

-- +goose Up
ALTER TABLE wake_endpoint ADD COLUMN process JSON NULL, ADD COLUMN renewed_at DATETIME(6) NULL;

-- +goose Down
ALTER TABLE wake_endpoint DROP COLUMN process, DROP COLUMN renewed_at;
