-- LoadWorkItems writes a batch's new work items with one statement, however
-- many there are. Why LOAD DATA, how the rows are streamed and why the
-- runtime checks rows affected and warnings: see events.sql.
--
-- Same values as InsertWorkItem (queries/work_item.sql): run_after is the
-- database clock plus each row's delay (@delay_micros), never a host's
-- clock; items in lanes arrive blocked and enqueue's lane settling promotes
-- the heads in the same transaction; a refused item's record
-- (@refused_by_work_id set) arrives terminal, ended now. work_id is
-- AUTO_RANDOM: the runtime reads the ids back by uk_work_item_event_type
-- (LockWorkItemsByEvents).
LOAD DATA LOCAL INFILE 'Reader::laneq_work_items'
INTO TABLE work_item
FIELDS TERMINATED BY '\t' ESCAPED BY '\\'
LINES TERMINATED BY '\n'
(event_id, scope_id, generation, work_type, queue_class, state, priority,
 source_lane_key, target_lane_key, lane_ordinal, projection_key,
 projection_active_key, projection_queued_key, dependency_wake_key,
 dependency_keys, unique_live_key, rate_key, @refused_by_work_id,
 failure_class, failure_summary, @delay_micros)
SET run_after = DATE_ADD(NOW(6), INTERVAL @delay_micros MICROSECOND),
    refused_by_work_id = @refused_by_work_id,
    terminal_at = IF(@refused_by_work_id IS NULL, NULL, NOW(6)),
    created_at = NOW(6),
    updated_at = NOW(6);
