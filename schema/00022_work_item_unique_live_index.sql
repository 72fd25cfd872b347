-- +goose NO TRANSACTION
-- At most one live item per unique key: enqueue reads the batch's keys with
-- one batch point get on it (LockLiveUniqueKeys) under the scope lock, and
-- the index refuses a second live row from a writer that bypassed that.
-- NULLs (no key, or terminal) do not collide.

-- +goose Up
ALTER TABLE work_item ADD UNIQUE KEY uk_work_item_unique_live (unique_live_key);

-- +goose Down
ALTER TABLE work_item DROP INDEX uk_work_item_unique_live;
