-- +goose NO TRANSACTION
-- Where a scope's worker processes listen for wakes (issue 12): after a
-- commit that made work claimable, a laneq process sends a small
-- authenticated datagram to each live endpoint of the scope, so another
-- process starts the work within milliseconds instead of at its next
-- generation probe. One row per listening process incarnation and scope,
-- renewed rarely; expires_at lets senders skip, and anyone delete, the rows
-- of processes that died without removing theirs. Small: it grows with
-- processes, never with items.
--
-- wake_key is the endpoint's own HMAC-SHA256 key: a datagram must carry a
-- tag made with it, so an outsider who can reach the port but not this
-- table cannot forge a wake. Whoever can read this table can already write
-- the queue.

-- +goose Up
CREATE TABLE wake_endpoint (
    scope_id      VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_0900_bin NOT NULL,
    endpoint_id   VARCHAR(64)  CHARACTER SET utf8mb4 COLLATE utf8mb4_0900_bin NOT NULL,
    address       VARCHAR(255) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    wake_key      VARBINARY(32) NOT NULL,
    registered_at DATETIME(6)  NOT NULL,
    expires_at    DATETIME(6)  NOT NULL,
    PRIMARY KEY (scope_id, endpoint_id) CLUSTERED
);

-- +goose Down
DROP TABLE wake_endpoint;
