-- +goose NO TRANSACTION
-- Replay (workqueue.Queue.Replay) gives a dead item a child: a new work item
-- for the same event and work type, which must not reopen the terminal
-- original. replay_depth tells the generations of one (event, work type)
-- apart: 0 for the item enqueue made, its parent's plus one for a replay.
-- The unique key takes it in, so duplicate deliveries and materializer
-- retries still cannot create a second original, and two replays of one
-- parent cannot both commit a child (each is parent depth + 1). The
-- parent's replayed_at is the reservation Replay takes first; this key is
-- the backstop. Dropping and adding the key are two statements: TiDB does
-- not drop and re-add one index name in one ALTER.

-- +goose Up
ALTER TABLE work_item ADD COLUMN replay_depth INT NOT NULL DEFAULT 0;
ALTER TABLE work_item DROP INDEX uk_work_item_event_type;
ALTER TABLE work_item ADD UNIQUE KEY uk_work_item_event_type (event_id, work_type, replay_depth);

-- +goose Down
ALTER TABLE work_item DROP INDEX uk_work_item_event_type;
ALTER TABLE work_item ADD UNIQUE KEY uk_work_item_event_type (event_id, work_type);
ALTER TABLE work_item DROP COLUMN replay_depth;
