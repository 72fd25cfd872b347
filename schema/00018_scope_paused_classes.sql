-- +goose NO TRANSACTION
-- Pause and resume (workqueue.Queue.PauseClass, ResumeClass): the queue
-- classes of a scope an operator paused, a JSON array of class names, NULL
-- or empty when none is. It sits on the scope row because every claim turn
-- and every probe already point-reads that row (GetScope): claimers learn of
-- a pause or a resume with no statement of their own, and a paused class
-- costs no scan at all. Durable: a restarted worker reads it on its first
-- turn. Small: bounded by the scope's classes, never by items.

-- +goose Up
ALTER TABLE scope ADD COLUMN paused_classes JSON NULL;

-- +goose Down
ALTER TABLE scope DROP COLUMN paused_classes;
