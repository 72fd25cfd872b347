-- +goose NO TRANSACTION
-- The executable queue and the only owner of mutable execution state: claim,
-- lease, retry, failure budget, terminal outcome, lane and projection state.
--
-- Keys are utf8mb4_0900_bin, a NO PAD binary collation: 'k' and 'k ' are two
-- keys (TiDB's utf8mb4_bin and ascii_bin are PAD SPACE and would merge them),
-- and equality rides the indexes. work_type, queue_class and state stay
-- ascii_bin: the runtime refuses spaces in them.
--
-- Times are UTC: statements write and compare the database's NOW(6), and
-- workqueue.New refuses a session whose time zone is not always UTC, so no
-- session's zone can shift a due time or a lease. (UTC_TIMESTAMP(6) would not
-- need that check, but sqlc v1.31.1's MySQL catalog knows UTC_TIMESTAMP only
-- without a precision argument, and with none it has whole seconds.)
--
-- Key widths (TiDB limit 3,072 bytes per index key): scope_id 512 (128
-- utf8mb4 characters), lane keys 1,020 (255 utf8mb4 characters), projection
-- keys 1,020, wake key 1,020, state 24, queue_class 32, work_type 64 (ascii),
-- BIGINT/DATETIME(6) 8. The widest index below is about 1,600 bytes.

-- +goose Up
CREATE TABLE work_item (
    work_id                BIGINT       NOT NULL AUTO_RANDOM,
    event_id               BIGINT       NOT NULL,
    scope_id               VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_0900_bin NOT NULL,
    generation             BIGINT       NOT NULL,
    work_type              VARCHAR(64)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    queue_class            VARCHAR(32)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL DEFAULT 'default',
    -- Live: pending (lane head, claimable once due) | blocked (lane follower,
    -- promoted when its predecessors finish) | processing (leased) |
    -- waiting_dependency. Terminal: completed | skipped | dead.
    -- A retry is a pending row with a future run_after.
    state                  VARCHAR(24)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL DEFAULT 'pending',
    -- When a claimer may next take the row: a pending row once due, a
    -- processing row once its lease expired (run_after is the lease expiry
    -- while processing, so fresh claims, stale reclaims and due times all
    -- ride idx_work_item_claim and idx_work_item_due). Every transition into
    -- pending sets it to at least the database's current time, which keeps a
    -- claimer's scan floor valid (see ClaimCandidates).
    run_after              DATETIME(6)  NOT NULL,
    priority               INT          NOT NULL DEFAULT 0,
    -- Claims taken, reclaims included (a release gives one back). At
    -- Config.MaxAttempts an expired lease sends the row to dead instead of
    -- being reclaimed again. Separate from safe_retry_count, which counts
    -- consecutive safe retries and resets after durable forward progress.
    attempt_count          INT          NOT NULL DEFAULT 0,
    safe_retry_count       INT          NOT NULL DEFAULT 0,
    lease_owner            VARCHAR(128) COLLATE utf8mb4_0900_bin NULL,
    -- Monotonic fencing token: every state transition increments it; renew,
    -- release, retry and finalization must present the current value, and
    -- promotion CASes on the value its locking read saw.
    lease_token            BIGINT       NOT NULL DEFAULT 0,
    -- Lanes: NULL means "no lane" (a missing target lane blocks on the source
    -- lane only).
    source_lane_key        VARCHAR(255) COLLATE utf8mb4_0900_bin NULL,
    target_lane_key        VARCHAR(255) COLLATE utf8mb4_0900_bin NULL,
    -- FIFO position inside both lanes: the scope's admission order. Each work
    -- item takes its own ordinal (an event's first item shares the event's).
    lane_ordinal           BIGINT       NOT NULL,
    -- Source projection: all generations of one projection share
    -- projection_key; only the active one sets projection_active_key, so the
    -- unique index admits at most one active generation. A queued successor
    -- has projection_key set and projection_active_key NULL.
    projection_key         VARCHAR(255) COLLATE utf8mb4_0900_bin NULL,
    projection_active_key  VARCHAR(255) COLLATE utf8mb4_0900_bin NULL,
    terminal_at            DATETIME(6)  NULL,
    replay_of_work_id      BIGINT       NULL,
    replayed_at            DATETIME(6)  NULL,
    failure_class          VARCHAR(64)  NULL,
    -- Sanitized: never a payload, credential or token.
    failure_summary        VARCHAR(1024) NULL,
    -- Dependency wait: the wake key is a hint; dependency_satisfied rows are
    -- the readiness authority.
    dependency_wake_key    VARCHAR(255) COLLATE utf8mb4_0900_bin NULL,
    dependency_probe_after DATETIME(6)  NULL,
    created_at             DATETIME(6)  NOT NULL,
    updated_at             DATETIME(6)  NOT NULL,
    PRIMARY KEY (work_id) CLUSTERED,
    -- Duplicate receipts or materializer retries cannot create duplicate work.
    UNIQUE KEY uk_work_item_event_type (event_id, work_type),
    UNIQUE KEY uk_work_item_projection_active (projection_active_key),
    -- Claims: one scope, its active generation, one queue class, one state,
    -- in due order. Fresh claims read the pending range up to now (rows not
    -- yet due are past its end, whatever their number); stale reclaims read
    -- the processing range up to now (live leases are past its end). Both
    -- start at the claimer's floor, past the MVCC delete markers earlier
    -- claims left. work_type trails so the work-type filter runs on the
    -- index and LIMIT is pushed below the table lookup.
    KEY idx_work_item_claim (scope_id, generation, queue_class, state, run_after, lane_ordinal, work_id, work_type),
    -- Lanes: live rows of one lane of one generation in FIFO order. State sits
    -- before the ordinal so terminal history is outside every scanned range,
    -- and a lane's one non-blocked live row (its head) is a range of its own,
    -- apart from however many blocked followers the lane has.
    KEY idx_work_item_source_lane (scope_id, generation, source_lane_key, state, lane_ordinal, work_id),
    KEY idx_work_item_target_lane (scope_id, generation, target_lane_key, state, lane_ordinal, work_id),
    -- Due times across classes: NextWorkAt reads bounded spans after now of
    -- the pending range (retries coming due) and the processing range (leases
    -- expiring).
    KEY idx_work_item_due (scope_id, generation, state, run_after, work_id),
    -- Projection coverage and successor lookup (seed 004's index shape).
    KEY idx_work_item_projection (projection_key, lane_ordinal, event_id, work_id),
    -- Dependency wake: waiters of one wake key.
    KEY idx_work_item_dependency (scope_id, dependency_wake_key, state)
);

-- +goose Down
DROP TABLE work_item;
