-- +goose NO TRANSACTION
-- A projection generation's input is the range of its projection's events
-- after the previous generation's selected event through its own, in
-- admission order (ProjectionInput): one range on this index, however many
-- other events the source or the scope holds.

-- +goose Up
ALTER TABLE event ADD KEY idx_event_projection (projection_key, enqueue_ordinal);

-- +goose Down
ALTER TABLE event DROP INDEX idx_event_projection;
