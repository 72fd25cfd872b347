-- Wake endpoints (issue 12): where a scope's worker processes listen for
-- wakes. Every statement is keyed by the clustered primary key
-- (scope_id, endpoint_id) or its scope prefix: the table holds a row per
-- listening process, so a scope's range is as long as its process count.

-- name: RegisterWakeEndpoint :exec
-- A process announces (or re-announces after its row expired or was
-- swept) where it listens. An upsert by primary key: a restarted process
-- registers a new endpoint id, so an update only ever renews this
-- incarnation's own row. Expiry from the database clock, like leases.
-- process is what the process says about itself, for operators only.
INSERT INTO wake_endpoint (scope_id, endpoint_id, address, wake_key, registered_at, expires_at, process, renewed_at)
VALUES (sqlc.arg(scope_id), sqlc.arg(endpoint_id), sqlc.arg(address), sqlc.arg(wake_key), NOW(6),
        DATE_ADD(NOW(6), INTERVAL CAST(sqlc.arg(ttl_micros) AS SIGNED) MICROSECOND), sqlc.narg(process), NOW(6))
ON DUPLICATE KEY UPDATE address = VALUES(address),
                        wake_key = VALUES(wake_key),
                        expires_at = VALUES(expires_at),
                        process = VALUES(process),
                        renewed_at = VALUES(renewed_at);

-- name: RenewWakeEndpoint :execrows
-- Moves this endpoint's expiry; 0 rows means the row is gone (swept as
-- expired while the process was paused): the caller registers again.
UPDATE wake_endpoint
SET expires_at = DATE_ADD(NOW(6), INTERVAL CAST(sqlc.arg(ttl_micros) AS SIGNED) MICROSECOND),
    process = sqlc.narg(process),
    renewed_at = NOW(6)
WHERE scope_id = sqlc.arg(scope_id)
  AND endpoint_id = sqlc.arg(endpoint_id);

-- name: RemoveWakeEndpoint :execrows
-- A process that stops removes its endpoint, so no sender wakes a port
-- that may by then belong to another program.
DELETE FROM wake_endpoint
WHERE scope_id = sqlc.arg(scope_id)
  AND endpoint_id = sqlc.arg(endpoint_id);

-- name: ListWakeEndpoints :many
-- The live endpoints a sender wakes: the scope's primary-key range, expired
-- rows filtered after the read (there are as many rows as processes, live
-- or recently dead, so an expiry index would cost every renewal an index
-- write for nothing). Senders cache the list and read it again rarely.
-- Every column in table order: with a projection over the reader, TiDB
-- placed it above or inside the reader from one run to the next.
SELECT scope_id, endpoint_id, address, wake_key, registered_at, expires_at
FROM wake_endpoint
WHERE scope_id = sqlc.arg(scope_id)
  AND expires_at > NOW(6)
ORDER BY endpoint_id;

-- name: SweepExpiredWakeEndpoints :execrows
-- Deletes endpoints that expired more than grace_micros ago (processes
-- that died without removing theirs), at most LIMIT of them, on the
-- scope's primary-key range: whoever lists the scope may sweep it, so the
-- range stays as long as the live process count.
DELETE FROM wake_endpoint
WHERE scope_id = sqlc.arg(scope_id)
  AND expires_at < DATE_SUB(NOW(6), INTERVAL CAST(sqlc.arg(grace_micros) AS SIGNED) MICROSECOND)
LIMIT ?;

-- One endpoint for many scopes (worker.Group): one process, one socket and
-- one key serve every scope it lists, with a row per scope so that senders
-- keep reading one scope's primary-key range (ListWakeEndpoints). Each
-- statement below writes all of them at once, batched on the primary key:
-- registering, renewing or removing a thousand scopes is one statement.

-- name: RegisterWakeEndpointForScopes :execrows
-- Registers endpoint_id for every listed scope that exists (a scope row read
-- by a batch point get; missing scopes get no row, and the caller compares
-- the count). An upsert by primary key, like RegisterWakeEndpoint.
INSERT INTO wake_endpoint (scope_id, endpoint_id, address, wake_key, registered_at, expires_at, process, renewed_at)
SELECT s.scope_id, sqlc.arg(endpoint_id), sqlc.arg(address), sqlc.arg(wake_key), NOW(6),
       DATE_ADD(NOW(6), INTERVAL CAST(sqlc.arg(ttl_micros) AS SIGNED) MICROSECOND), sqlc.narg(process), NOW(6)
FROM scope s
WHERE s.scope_id IN (sqlc.slice(scope_ids))
ON DUPLICATE KEY UPDATE address = VALUES(address),
                        wake_key = VALUES(wake_key),
                        expires_at = VALUES(expires_at),
                        process = VALUES(process),
                        renewed_at = VALUES(renewed_at);

-- name: RenewWakeEndpointForScopes :execrows
-- Moves the expiry of endpoint_id's rows of the listed scopes: a batch of
-- primary-key point gets. Fewer rows than scopes means some were swept
-- while the process was paused: the caller registers them all again.
UPDATE wake_endpoint
SET expires_at = DATE_ADD(NOW(6), INTERVAL CAST(sqlc.arg(ttl_micros) AS SIGNED) MICROSECOND),
    process = sqlc.narg(process),
    renewed_at = NOW(6)
WHERE scope_id IN (sqlc.slice(scope_ids))
  AND endpoint_id = sqlc.arg(endpoint_id);

-- name: RemoveWakeEndpointForScopes :execrows
-- A stopping process removes endpoint_id's rows of the listed scopes (batch
-- point gets on the primary key).
DELETE FROM wake_endpoint
WHERE scope_id IN (sqlc.slice(scope_ids))
  AND endpoint_id = sqlc.arg(endpoint_id);

-- name: SweepExpiredWakeEndpointsForScopes :execrows
-- SweepExpiredWakeEndpoints for many scopes at once: the listed scopes'
-- primary-key ranges (as long as their processes, live or recently dead),
-- at most LIMIT rows deleted.
DELETE FROM wake_endpoint
WHERE scope_id IN (sqlc.slice(scope_ids))
  AND expires_at < DATE_SUB(NOW(6), INTERVAL CAST(sqlc.arg(grace_micros) AS SIGNED) MICROSECOND)
LIMIT ?;
