-- +goose NO TRANSACTION
-- A refused enqueue's record (issue 54): an item whose Work.UniqueKey was
-- held by a live item is not created live; it is stored terminal at once
-- (state 'skipped', failure class 'unique_refused', terminal_at set, no
-- unique key, no lane), and this column names the item that held the key.
-- uk_work_item_event_type then finds the record when the same event is
-- enqueued again (a redeploy re-enqueueing a periodic tick), and enqueue
-- reports the same refusal instead of creating the work late once the key
-- is free. NULL on every other row. Read only with the event's items
-- (LockWorkItemsByEvents): no index.

-- +goose Up
ALTER TABLE work_item ADD COLUMN refused_by_work_id BIGINT NULL;

-- +goose Down
ALTER TABLE work_item DROP COLUMN refused_by_work_id;
