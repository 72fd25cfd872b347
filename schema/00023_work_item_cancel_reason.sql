-- +goose NO TRANSACTION
-- Cancelling a running item (issue 39, Queue.Cancel): a processing row
-- whose cancellation was requested holds the operator's reason here (an
-- empty string when none was given); every other row holds NULL. The
-- holder learns of it at its next heartbeat: the renewal statements match
-- only rows without it, and the read-back of a renewal that matched
-- nothing returns it. Every statement that gives a processing row back
-- (a retry, a release, a dependency wait, a takeover of its expired lease)
-- matches only rows without it, so a cancelled item never runs again: its
-- holder's fenced finish, or the claimer that finds its lease expired,
-- ends it skipped with failure class "cancelled".

-- +goose Up
ALTER TABLE work_item ADD COLUMN cancel_reason VARCHAR(1024) CHARACTER SET utf8mb4 COLLATE utf8mb4_0900_bin NULL;

-- +goose Down
ALTER TABLE work_item DROP COLUMN cancel_reason;
