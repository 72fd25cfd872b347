-- name: InsertEvent :execlastid
-- event_id is AUTO_RANDOM (no write hot spot on the primary key); the driver
-- returns the generated id.
INSERT INTO event (
    receipt_id, scope_id, generation, route_id, route_version, event_kind,
    source_kind, source_id, delivery_sequence, enqueue_ordinal,
    idempotency_key, payload_hash, payload, projection_key, created_at
) VALUES (
    sqlc.narg(receipt_id), sqlc.arg(scope_id), sqlc.arg(generation),
    sqlc.arg(route_id), sqlc.arg(route_version), sqlc.arg(event_kind),
    sqlc.arg(source_kind), sqlc.arg(source_id), sqlc.arg(delivery_sequence),
    sqlc.arg(enqueue_ordinal), sqlc.arg(idempotency_key),
    sqlc.arg(payload_hash), sqlc.arg(payload), sqlc.narg(projection_key), NOW(6)
);

-- name: GetEvent :one
-- Primary-key point read.
SELECT event_id, receipt_id, scope_id, generation, route_id, route_version,
       event_kind, source_kind, source_id, delivery_sequence, enqueue_ordinal,
       idempotency_key, payload_hash, payload, created_at, projection_key
FROM event
WHERE event_id = sqlc.arg(event_id);

-- name: GetEvents :many
-- GetEvent for a claim batch: one batch point get instead of a read per
-- claimed item.
SELECT event_id, receipt_id, scope_id, generation, route_id, route_version,
       event_kind, source_kind, source_id, delivery_sequence, enqueue_ordinal,
       idempotency_key, payload_hash, payload, created_at, projection_key
FROM event
WHERE event_id IN (sqlc.slice(event_ids));

-- name: GetEventByIdempotencyKey :one
-- Point read on uk_event_idempotency: resolves a duplicate delivery to the
-- event that already holds its identity.
SELECT event_id, receipt_id, scope_id, generation, route_id, route_version,
       event_kind, source_kind, source_id, delivery_sequence, enqueue_ordinal,
       idempotency_key, payload_hash, payload, created_at, projection_key
FROM event
WHERE scope_id = sqlc.arg(scope_id)
  AND idempotency_key = sqlc.arg(idempotency_key);

-- name: LockEventsByIdempotencyKeys :many
-- Duplicate detection for an enqueue batch. A locking read is a current read
-- in a TiDB pessimistic transaction: it sees events committed while this
-- transaction waited for the scope lock, which a plain SELECT (reading the
-- transaction's start snapshot) would miss and then fail on 1062.
-- Batch point gets on uk_event_idempotency.
SELECT event_id, idempotency_key, projection_key
FROM event
WHERE scope_id = sqlc.arg(scope_id)
  AND idempotency_key IN (sqlc.slice(idempotency_keys))
FOR UPDATE;
