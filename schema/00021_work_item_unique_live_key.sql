-- +goose NO TRANSACTION
-- Uniqueness while live (issue 39): an item enqueued with a unique key
-- holds "<scope>\n<generation>\n<key>" here from its enqueue until it is
-- terminal (completed, skipped, dead: every terminal transition sets it
-- NULL, as it clears projection_active_key); items without a key hold
-- NULL. Scope ids and keys are printable ASCII, so the newlines cannot
-- occur inside them. NO PAD binary collation: "k" and "k " are two keys.
-- Its unique key is the next migration.

-- +goose Up
ALTER TABLE work_item ADD COLUMN unique_live_key VARCHAR(300) CHARACTER SET utf8mb4 COLLATE utf8mb4_0900_bin NULL;

-- +goose Down
ALTER TABLE work_item DROP COLUMN unique_live_key;
