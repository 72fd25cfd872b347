-- Ingress receipts (issue 11): durable admission of a provider delivery,
-- then the receipt router's own claim, retry and terminal state on the same
-- row until its events are materialized (seed 001, "Receipt Routing
-- State": there is no second router queue). The router's claim path rides
-- idx_ingress_receipt_claim (scope, route class, status, due, id); every
-- other statement is a primary-key or delivery-key point read.

-- name: AcceptReceipt :execlastid
-- Durable admission. A redelivery hits uk_ingress_receipt_delivery (scope,
-- delivery id; NO PAD: ids differing by a trailing space are two
-- deliveries) and fails with a duplicate-key error: the caller then reads
-- the existing receipt and writes nothing. received_at is the database
-- clock less the time the request has spent in the process, so no host
-- clock or session time zone is written. Due at once.
INSERT INTO ingress_receipt (
    scope_id, delivery_id, http_method, route_key, content_type, event_kind,
    correlation_id, route_class, payload_hash, body,
    received_at, accepted_at, next_attempt_at, created_at, updated_at)
VALUES (
    sqlc.arg(scope_id), sqlc.arg(delivery_id), sqlc.arg(http_method), sqlc.arg(route_key),
    sqlc.arg(content_type), sqlc.narg(event_kind), sqlc.narg(correlation_id), sqlc.arg(route_class),
    sqlc.arg(payload_hash), sqlc.arg(body),
    DATE_SUB(NOW(6), INTERVAL CAST(sqlc.arg(received_ago_micros) AS SIGNED) MICROSECOND),
    NOW(6), NOW(6), NOW(6), NOW(6));

-- name: GetReceiptByDelivery :one
-- The receipt of one delivery: a point read of uk_ingress_receipt_delivery
-- (the redelivery path, and the receipt a webhook answers with).
SELECT receipt_id, scope_id, delivery_id, http_method, route_key, content_type, event_kind,
       correlation_id, route_class, payload_hash, received_at, accepted_at, router_status,
       attempt_count, next_attempt_at, claim_owner, claim_token, lease_until,
       last_error_class, last_error_summary, materialized_at, event_ids
FROM ingress_receipt
WHERE scope_id = sqlc.arg(scope_id)
  AND delivery_id = sqlc.arg(delivery_id);

-- name: GetReceipt :one
-- One receipt's routing state by primary key (operators, readback). The
-- body is left out: it is read only by the router that claimed it.
SELECT receipt_id, scope_id, delivery_id, http_method, route_key, content_type, event_kind,
       correlation_id, route_class, payload_hash, received_at, accepted_at, router_status,
       attempt_count, next_attempt_at, claim_owner, claim_token, lease_until,
       last_error_class, last_error_summary, materialized_at, event_ids
FROM ingress_receipt
WHERE receipt_id = sqlc.arg(receipt_id);

-- name: ReceiptCandidates :many
-- The router's scan for one (scope, class): due pending receipts and
-- receipts whose routing lease expired (a router died or froze), each
-- branch oldest due first. Two ordered, limited ranges of
-- idx_ingress_receipt_claim joined by UNION ALL (one IN range would be read
-- whole to be sorted); the caller merges the two by due time.
--
-- The pending range starts at from_time, the router's floor: every
-- transition into pending (an accept, a retry) sets next_attempt_at to at
-- least the database's now, so what becomes due later sorts after what the
-- router consumed, and the entries its earlier claims moved away lie before
-- the floor (on the embedded engine a scan costs time for every entry in its
-- range, LIMIT or not; TiKV stops at the limit). Retries not yet due lie past
-- now and are never read. An in-flight claim keeps next_attempt_at =
-- lease_until, so the routing branch reads only expired leases; they are
-- rare (a router died) and taken 16 per turn.
(SELECT p.receipt_id, p.next_attempt_at
 FROM ingress_receipt p
 WHERE p.scope_id = sqlc.arg(scope_id)
   AND p.route_class = sqlc.arg(route_class)
   AND p.router_status = 'pending'
   AND p.next_attempt_at >= sqlc.arg(from_time)
   AND p.next_attempt_at <= NOW(6)
 ORDER BY p.next_attempt_at, p.receipt_id
 LIMIT ?)
UNION ALL
(SELECT r.receipt_id, r.next_attempt_at
 FROM ingress_receipt r
 WHERE r.scope_id = sqlc.arg(scope_id)
   AND r.route_class = sqlc.arg(route_class)
   AND r.router_status = 'routing'
   AND r.next_attempt_at <= NOW(6)
 ORDER BY r.next_attempt_at, r.receipt_id
 LIMIT 16);

-- name: ClaimReceipts :execrows
-- Row CAS by primary key on the candidates still due: each claim bumps the
-- fencing token, counts an attempt (a receipt that kills its router is
-- still counted) and moves next_attempt_at to the lease's end, where an
-- abandoned claim becomes a candidate again. The router runs it as a
-- statement of its own (autocommit: no row lock outlives it), then
-- ClaimedReceipts reads back what it took.
UPDATE ingress_receipt
SET router_status = 'routing',
    claim_owner = sqlc.arg(claim_owner),
    claim_token = claim_token + 1,
    attempt_count = attempt_count + 1,
    lease_until = DATE_ADD(NOW(6), INTERVAL CAST(sqlc.arg(lease_micros) AS SIGNED) MICROSECOND),
    next_attempt_at = DATE_ADD(NOW(6), INTERVAL CAST(sqlc.arg(lease_micros) AS SIGNED) MICROSECOND),
    updated_at = NOW(6)
WHERE receipt_id IN (sqlc.slice(receipt_ids))
  AND router_status IN ('pending', 'routing')
  AND next_attempt_at <= NOW(6);

-- name: ClaimedReceipts :many
-- The receipts this router's claim took (their tokens and bodies), read
-- by primary key right after ClaimReceipts committed. claim_owner keeps
-- out a receipt another router took over since (possible only once this
-- claim's lease ended); the token read here fences every later write.
SELECT receipt_id, delivery_id, http_method, route_key, content_type, event_kind,
       correlation_id, route_class, payload_hash, body, received_at, accepted_at,
       attempt_count, claim_token
FROM ingress_receipt
WHERE receipt_id IN (sqlc.slice(receipt_ids))
  AND router_status = 'routing'
  AND claim_owner = sqlc.arg(claim_owner)
ORDER BY receipt_id;

-- name: LockReceiptFences :many
-- First statement of a materializing transaction: locks the batch's rows
-- by primary key and returns their tokens, so the router enqueues only the
-- receipts it still holds (a receipt whose lease another router took over
-- is left out, and that router's enqueue finds the events if it was first).
-- Lock order: receipts, then the scope row (Enqueue), then events and items.
SELECT receipt_id, claim_token, router_status
FROM ingress_receipt
WHERE receipt_id IN (sqlc.slice(receipt_ids))
FOR UPDATE;

-- name: MarkReceiptsMaterialized :execrows
-- Last statement of the materializing transaction: the batch's receipts
-- become materialized with the event ids they became, fenced per row by
-- "id:token" pairs (FIND_IN_SET) and keyed by primary key. event_ids_by_receipt
-- is a JSON object from receipt id to its event id array.
UPDATE ingress_receipt
SET router_status = 'materialized',
    materialized_at = NOW(6),
    event_ids = JSON_EXTRACT(sqlc.arg(event_ids_by_receipt), CONCAT('$."', receipt_id, '"')),
    lease_until = NULL,
    updated_at = NOW(6)
WHERE receipt_id IN (sqlc.slice(receipt_ids))
  AND router_status = 'routing'
  AND FIND_IN_SET(CONCAT(receipt_id, ':', claim_token), sqlc.arg(fences)) > 0;

-- name: RetryReceipt :execrows
-- A transient routing failure: pending again after a backoff, with the
-- failure's sanitized class and summary. Fenced by the claim token: a
-- router whose lease was taken over changes nothing (0 rows).
UPDATE ingress_receipt
SET router_status = 'pending',
    next_attempt_at = DATE_ADD(NOW(6), INTERVAL CAST(sqlc.arg(backoff_micros) AS SIGNED) MICROSECOND),
    lease_until = NULL,
    last_error_class = sqlc.arg(error_class),
    last_error_summary = sqlc.arg(error_summary),
    updated_at = NOW(6)
WHERE receipt_id = sqlc.arg(receipt_id)
  AND router_status = 'routing'
  AND claim_token = sqlc.arg(claim_token);

-- name: FailReceipt :execrows
-- A terminal routing failure (the route refused the receipt, or its
-- attempts ran out): recorded and left for operators; never claimed again
-- (the claim ranges read only pending and routing). Fenced like RetryReceipt.
UPDATE ingress_receipt
SET router_status = 'failed',
    lease_until = NULL,
    last_error_class = sqlc.arg(error_class),
    last_error_summary = sqlc.arg(error_summary),
    updated_at = NOW(6)
WHERE receipt_id = sqlc.arg(receipt_id)
  AND router_status = 'routing'
  AND claim_token = sqlc.arg(claim_token);

-- name: NextReceiptDue :many
-- When the router's exact timer for one (scope, class) should fire, once a
-- turn found nothing due: the microseconds from the database's now to the
-- earliest pending receipt due later (a retry's backoff) and to the
-- earliest live routing lease's end (where an abandoned claim becomes
-- claimable), within within_micros (the router's backstop); no row: none
-- within it. The caller takes the smaller. The pending branch's range is
-- (now, now + within], the lease branch's starts a few seconds earlier
-- (below): the due backlog and the expired leases before them (which the
-- turn's scan handles) and the retries and leases due later are never
-- read (on the embedded engine a scan costs time for every entry in its
-- range, LIMIT or not); at most one entry each. Measured on the database
-- clock, so no host clock or session time zone enters.
--
-- The lease branch starts at lease_from_micros from now, a negative offset
-- of at most a few seconds (how long ago the router's last turn began), as
-- NextWorkAt's does: a lease that ran out after that turn read it live is
-- claimable, yet announced by nobody (its router is gone), so the lookup after the
-- turn must see it (a negative due_in_micros: due now).
(SELECT CAST(TIMESTAMPDIFF(MICROSECOND, NOW(6), p.next_attempt_at) AS SIGNED) AS due_in_micros
 FROM ingress_receipt p
 WHERE p.scope_id = sqlc.arg(scope_id)
   AND p.route_class = sqlc.arg(route_class)
   AND p.router_status = 'pending'
   AND p.next_attempt_at > NOW(6)
   AND p.next_attempt_at <= DATE_ADD(NOW(6), INTERVAL CAST(sqlc.arg(within_micros) AS SIGNED) MICROSECOND)
 ORDER BY p.next_attempt_at
 LIMIT 1)
UNION ALL
(SELECT CAST(TIMESTAMPDIFF(MICROSECOND, NOW(6), r.next_attempt_at) AS SIGNED) AS due_in_micros
 FROM ingress_receipt r
 WHERE r.scope_id = sqlc.arg(scope_id)
   AND r.route_class = sqlc.arg(route_class)
   AND r.router_status = 'routing'
   AND r.next_attempt_at > DATE_ADD(NOW(6), INTERVAL CAST(sqlc.arg(lease_from_micros) AS SIGNED) MICROSECOND)
   AND r.next_attempt_at <= DATE_ADD(NOW(6), INTERVAL CAST(sqlc.arg(within_micros) AS SIGNED) MICROSECOND)
 ORDER BY r.next_attempt_at
 LIMIT 1);
