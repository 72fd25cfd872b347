-- +goose NO TRANSACTION
-- Rate limits per key of an item (issue 39, runtime/ratelimit Limit.PerKey):
-- the key the item's starts are counted under (a customer, an account),
-- printable ASCII, NULL for none. It is read only with the item's row, by
-- primary key, when a claim reads back what it took (ClaimedByRef): no
-- index, and no claim scan reads it.

-- +goose Up
ALTER TABLE work_item ADD COLUMN rate_key VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NULL;

-- +goose Down
ALTER TABLE work_item DROP COLUMN rate_key;
