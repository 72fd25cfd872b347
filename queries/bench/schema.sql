-- The bench's own tables (`laneq bench`, cmd/laneq/bench): never part of
-- laneq's schema. The bench creates them in the fresh database it migrates,
-- beside laneq's tables, so every figure and every verdict is read back from
-- the database, not from the processes that may have been killed.

-- One row per execution attempt: written by the worker process when its
-- handler starts (before any effect), completed when the handler returns
-- (before the outcome's write, so a lane follower cannot start before its
-- predecessor's end is recorded), and given the outcome write's verdict
-- once the queue answered. A killed process leaves rows with no end; a
-- frozen one leaves rows whose finalization was rejected.
CREATE TABLE bench_attempt (
    attempt_id   BIGINT       NOT NULL AUTO_RANDOM,
    process      VARCHAR(64)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    work_id      BIGINT       NOT NULL,
    lease_token  BIGINT       NOT NULL,
    attempt      INT          NOT NULL,
    reclaimed    BOOLEAN      NOT NULL,
    -- Duration of the claim turn that handed this attempt its item.
    claim_us     BIGINT       NOT NULL,
    started_at   DATETIME(6)  NOT NULL,
    ended_at     DATETIME(6)  NULL,
    -- What the handler returned: ok (nil) | error (a designed failure) |
    -- canceled (an error after its context ended: lease lost, deadline,
    -- cancellation, shutdown).
    outcome      VARCHAR(16)  CHARACTER SET ascii COLLATE ascii_bin NULL,
    -- The queue's answer to the outcome's write: accepted | rejected.
    finish       VARCHAR(16)  CHARACTER SET ascii COLLATE ascii_bin NULL,
    finish_error VARCHAR(255) NULL,
    -- When the verdict was recorded (accepted ones in batches, so no earlier
    -- than the queue's answer): a fault caught the attempt in flight if it
    -- started before the fault and its verdict was recorded after. A frozen
    -- process can have ended its handler and still be waiting for its
    -- outcome's answer; its rejection is recorded after it wakes.
    finish_at    DATETIME(6)  NULL,
    -- The handler ignored its context (Spec.StubbornEvery): it ran for
    -- StubbornFor whatever its context said.
    stubborn     BOOLEAN      NOT NULL DEFAULT FALSE,
    PRIMARY KEY (attempt_id) CLUSTERED,
    KEY idx_bench_attempt_work (work_id, lease_token)
);

-- One row per injected fault, timed by the database clock the attempts use.
CREATE TABLE bench_fault (
    fault_id   BIGINT       NOT NULL AUTO_RANDOM,
    -- kill | freeze | tidb-pause | drop-connections
    kind       VARCHAR(24)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    -- The worker process it hit; empty for a TiDB pause.
    process    VARCHAR(64)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    detail     VARCHAR(255) NOT NULL,
    started_at DATETIME(6)  NOT NULL,
    ended_at   DATETIME(6)  NULL,
    PRIMARY KEY (fault_id) CLUSTERED
);

-- One row per cancellation the bench asked for (Spec.Cancels), timed by
-- the database clock: written before workqueue.Queue.Cancel is called, so
-- a cancel whose reply was lost is still on record, and given Cancel's
-- answer after. The verifier accepts an item ended skipped with failure
-- class cancelled only when a row here was not refused.
CREATE TABLE bench_cancel (
    cancel_id    BIGINT       NOT NULL AUTO_RANDOM,
    work_id      BIGINT       NOT NULL,
    -- The process whose attempt was running when the item was picked.
    process      VARCHAR(64)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    requested_at DATETIME(6)  NOT NULL,
    -- Cancel's answer: running (its holder is told at its next heartbeat)
    -- | ended (it was not running: it ended at once) | refused (it had
    -- ended) | NULL (no answer: the call failed).
    outcome      VARCHAR(16)  CHARACTER SET ascii COLLATE ascii_bin NULL,
    answered_at  DATETIME(6)  NULL,
    PRIMARY KEY (cancel_id) CLUSTERED,
    KEY idx_bench_cancel_work (work_id)
);
