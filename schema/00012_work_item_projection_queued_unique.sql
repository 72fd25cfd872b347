-- +goose NO TRANSACTION
-- At most one queued successor per projection, as
-- uk_work_item_projection_active admits at most one active generation; and
-- an enqueue locks the queued successors of a whole batch with one batch
-- point get on it (LockQueuedProjections).

-- +goose Up
ALTER TABLE work_item ADD UNIQUE KEY uk_work_item_projection_queued (projection_queued_key);

-- +goose Down
ALTER TABLE work_item DROP INDEX uk_work_item_projection_queued;
