-- LoadEvents writes a batch's new events with one statement, however many
-- there are (the batch materializer, runtime/workqueue/materialize.go).
--
-- Why LOAD DATA: sqlc compiles a fixed number of VALUES rows only, and its
-- :copyfrom for MySQL generates "LINES STARTING BY ''", which TiDB rejects
-- (error 1064); an INSERT ... SELECT over a JSON array took 13 s for 1,000
-- rows. So this statement is hand-written and sqlc never reads it (it is
-- outside the queries/*.sql glob). The rows stream from memory through the
-- driver's reader handler: the runtime registers a handler under a name of
-- its own for each run, replacing 'Reader::laneq_events' below. The load
-- joins the caller's transaction and rolls back with it.
--
-- A LOAD DATA turns what an INSERT refuses (a duplicate key, a value too
-- long, an invalid character) into a skipped or altered row and a warning:
-- the runtime compares rows affected with rows sent and reads
-- LoadWarningCount after it, and fails the transaction on any difference.
-- Duplicates are found under the scope lock before (as per-row enqueue
-- does), so none is expected.
--
-- Fields: tab-separated, backslash escapes (\\, \t, \n, \r, \0, \Z), \N for
-- NULL. The column order below is the order the runtime writes fields in.
-- event_id is AUTO_RANDOM: the runtime reads the ids back by
-- uk_event_idempotency (LockEventsByIdempotencyKeys, batch point gets).
LOAD DATA LOCAL INFILE 'Reader::laneq_events'
INTO TABLE event
FIELDS TERMINATED BY '\t' ESCAPED BY '\\'
LINES TERMINATED BY '\n'
(receipt_id, scope_id, generation, route_id, route_version, event_kind,
 source_kind, source_id, delivery_sequence, enqueue_ordinal,
 idempotency_key, payload_hash, payload, projection_key)
SET created_at = NOW(6);
