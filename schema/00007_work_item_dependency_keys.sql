-- +goose NO TRANSACTION
-- The exact dependency keys a waiting work item needs, any one of which
-- satisfies it (for example a target's current and previous slots). The
-- wake key (dependency_wake_key) is only a hint that groups them; these keys,
-- point-read in dependency_satisfied, are what decides. A JSON array of
-- strings; NULL when the item waits for nothing.

-- +goose Up
ALTER TABLE work_item ADD COLUMN dependency_keys JSON NULL;

-- +goose Down
ALTER TABLE work_item DROP COLUMN dependency_keys;
