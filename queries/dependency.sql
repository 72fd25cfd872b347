-- Dependency waits (seed 002). A work item whose durable prerequisite is
-- missing waits instead of retrying: it is invisible to claims and due
-- times, counts no retries, and as its lanes' head keeps its followers
-- behind it. dependency_satisfied rows are the readiness authority; the
-- wake key only groups waiters so a producer can wake them.
--
-- Entering a wait takes two transactions. BeginDependencyWait moves the
-- claimed row to dependency_registration and commits: from then on a
-- producer's wake (WakeDependencyWaitersPage) sees it. SettleDependencyRegistration
-- then reads the candidate keys with a locking read and moves the row to
-- waiting_dependency, or back to pending when one is satisfied, by a CAS on
-- the registration's token. Against a producer (SatisfyDependency commits,
-- then WakeDependencyWaitersPage runs):
--   - a key committed, or locked by a producer still running, before the
--     settle's read is seen by it (a locking read waits for the lock);
--   - a key inserted after that read is followed by its producer's wake
--     (after the key's commit), which finds the row as a registration (the
--     settle's CAS then loses) or as a waiter (it waits for the settle's
--     row lock, then sees it).
-- No step relies on locking an absent key: under READ COMMITTED TiDB's
-- locking point get does not lock one (measured on v8.5.6). A registration
-- interrupted between the two transactions is settled by the safety pass.

-- name: BeginDependencyWait :execrows
-- The claimed row leaves processing for dependency_registration, fenced by
-- its lease token. The attempt is given back (waiting is not a failure and
-- counts no retry), the lease is dropped, and run_after marks when the wait
-- began (the safety pass pages waiters in that order). Not for a row whose
-- cancellation was requested (see ReleaseLease).
UPDATE work_item
SET state = 'dependency_registration',
    dependency_wake_key = sqlc.arg(wake_key),
    dependency_keys = sqlc.arg(dependency_keys),
    attempt_count = GREATEST(attempt_count - 1, 0),
    run_after = NOW(6),
    lease_owner = NULL,
    lease_token = lease_token + 1,
    updated_at = NOW(6)
WHERE work_id = sqlc.arg(work_id)
  AND lease_token = sqlc.arg(lease_token)
  AND state = 'processing'
  AND cancel_reason IS NULL;

-- name: LockSatisfiedDependencies :many
-- The candidate keys that are satisfied, read under locks: a batch point get
-- on the primary key that waits for a producer holding one of them
-- (inserted, not yet committed) and then sees its commit. Locks: the keys
-- that exist, then (SettleDependencyRegistration) the row, the order a
-- producer takes them in.
SELECT dependency_key
FROM dependency_satisfied
WHERE scope_id = sqlc.arg(scope_id)
  AND dependency_key IN (sqlc.slice(dependency_keys))
FOR UPDATE;

-- name: SatisfiedDependencies :many
-- The candidate keys that are satisfied, read without locks: the recheck of
-- a woken item before any work, and the safety pass's probe. A batch point
-- get on the primary key (exact, NO PAD keys: an equality rides the key).
SELECT dependency_key
FROM dependency_satisfied
WHERE scope_id = sqlc.arg(scope_id)
  AND dependency_key IN (sqlc.slice(dependency_keys));

-- name: SettleDependencyRegistration :execrows
-- A registration becomes waiting_dependency, or pending when a candidate key
-- was satisfied; a CAS on the token BeginDependencyWait set, so a producer's
-- wake in between (which moved the token on) wins. A row made pending sorts
-- at now for claimers (see PromoteBlockedBatch).
UPDATE work_item
SET state = sqlc.arg(next_state),
    run_after = GREATEST(run_after, NOW(6)),
    lease_token = lease_token + 1,
    updated_at = NOW(6)
WHERE work_id = sqlc.arg(work_id)
  AND lease_token = sqlc.arg(lease_token)
  AND state = 'dependency_registration';

-- name: SatisfyDependency :exec
-- A producer records a dependency key. Idempotent: a key satisfied twice
-- keeps its first time. It commits before the key's waiters are woken
-- (WakeDependencyWaitersPage, after the commit): in the producer's own
-- transaction (workqueue.Tx.Satisfy) a wake would lock every waiter for as
-- long as that transaction runs and stamp them with a run_after older than
-- its commit, which claimers past it would not scan. A producer that dies
-- between the two leaves a satisfied key with waiters: the safety pass
-- wakes them.
INSERT INTO dependency_satisfied (scope_id, dependency_key, satisfied_at)
VALUES (sqlc.arg(scope_id), sqlc.arg(dependency_key), NOW(6))
ON DUPLICATE KEY UPDATE scope_id = scope_id;

-- name: WakeDependencyWaitersPage :execrows
-- One page of a wake key's waiters (registrations too) returns to pending,
-- an autocommit statement of its own after the key committed, through
-- idx_work_item_dependency: a point range per state, cut at the page.
-- Woken rows leave the range, so the caller runs it again until a page
-- comes back short; a wake key with 10,000 waiters is many short
-- statements, never one transaction that locks them all (their settles
-- would wait) or outgrows TiDB's transaction size limit. run_after is the
-- database time of this short statement, so a woken row sorts within the
-- claimers' straggler window of its commit. Over-notification is harmless
-- (a woken item rechecks its exact keys before any work and waits again);
-- a missed wake is not, which is why registrations are included.
UPDATE work_item
SET state = 'pending',
    run_after = GREATEST(run_after, NOW(6)),
    lease_token = lease_token + 1,
    updated_at = NOW(6)
WHERE scope_id = sqlc.arg(scope_id)
  AND dependency_wake_key = sqlc.arg(wake_key)
  AND state IN ('dependency_registration', 'waiting_dependency')
LIMIT ?;

-- name: DependencySafetyPage :many
-- The safety pass's first statement, and the next ones while its
-- registration reads come back full: registrations older than a grace (a
-- worker interrupted between BeginDependencyWait and
-- SettleDependencyRegistration left them) after the registration cursor,
-- beside one page of waiting rows after the waiting cursor, both on
-- idx_work_item_due in wait order (run_after is when the wait began), so a
-- scope with no waiters and no registrations costs this one statement a
-- pass. Each cursor is a (run_after, work_id) pair whose OR becomes two
-- ranges of the index, so ties at one time are neither skipped nor read
-- twice. The registration ranges end at reg_until or the grace, whichever
-- comes first (one LEAST bound, so TiDB keeps both ranges exact; the tie
-- range is at the cursor, the time of a registration the pass already
-- found past the grace). The embedded engine reads every entry of a range
-- before the LIMIT applies, so a pass working through a backlog of
-- registrations reads it one span of wait times at a time from the last
-- one it settled (reg_until is that one's time plus the span), never the
-- whole backlog per statement. Looking from the front (the zero cursor, a
-- far-future reg_until), it reads every registration not yet settled on
-- that engine (TiKV stops at the LIMIT): the newly old ones of a settled
-- scope; a backlog only when the pass meets it and when a span within it
-- runs dry. Registrations are
-- rare: a fixed 32 a statement (the runtime's registrationPage, which takes
-- a full 32 to mean more may follow); the waiting page is the caller's.
-- The scalar subquery (the scope's primary key) is folded into the ranges
-- before execution. DependencyWaitingPage is the waiting branch alone.
(SELECT r.work_id, r.lease_token, r.state, r.run_after, r.dependency_keys
 FROM work_item r
 WHERE r.scope_id = sqlc.arg(scope_id)
   AND r.generation = (SELECT s.active_generation FROM scope s WHERE s.scope_id = sqlc.arg(scope_id))
   AND r.state = 'dependency_registration'
   AND ((r.run_after > sqlc.arg(reg_after_time)
         AND r.run_after <= LEAST(CAST(sqlc.arg(reg_until) AS DATETIME(6)), DATE_SUB(NOW(6), INTERVAL CAST(sqlc.arg(grace_micros) AS SIGNED) MICROSECOND)))
        OR (r.run_after = sqlc.arg(reg_after_time) AND r.work_id > sqlc.arg(reg_after_work_id)))
 ORDER BY r.run_after, r.work_id
 LIMIT 32)
UNION ALL
(SELECT w.work_id, w.lease_token, w.state, w.run_after, w.dependency_keys
 FROM work_item w
 WHERE w.scope_id = sqlc.arg(scope_id)
   AND w.generation = (SELECT s.active_generation FROM scope s WHERE s.scope_id = sqlc.arg(scope_id))
   AND w.state = 'waiting_dependency'
   AND (w.run_after > sqlc.arg(after_time) OR (w.run_after = sqlc.arg(after_time) AND w.work_id > sqlc.arg(after_work_id)))
 ORDER BY w.run_after, w.work_id
 LIMIT ?);

-- name: DependencyWaitingPage :many
-- The safety pass's later pages: waiting rows of the active generation after
-- the pass's (run_after, work_id) cursor on idx_work_item_due, in wait
-- order, as DependencySafetyPage's second branch, without its registration
-- branch: a page over waiters reads no registration, however many crashed
-- workers left. The OR becomes two ranges of the index, so ties at one time
-- are neither skipped nor read twice; a page reads at most its LIMIT of
-- entries (plus their row lookups) however many rows wait; the scalar
-- subquery is folded into the range before execution.
SELECT w.work_id, w.lease_token, w.state, w.run_after, w.dependency_keys
FROM work_item w
WHERE w.scope_id = sqlc.arg(scope_id)
  AND w.generation = (SELECT s.active_generation FROM scope s WHERE s.scope_id = sqlc.arg(scope_id))
  AND w.state = 'waiting_dependency'
  AND (w.run_after > sqlc.arg(after_time) OR (w.run_after = sqlc.arg(after_time) AND w.work_id > sqlc.arg(after_work_id)))
ORDER BY w.run_after, w.work_id
LIMIT ?;

-- name: WakeDependencyWaiter :execrows
-- The safety pass wakes one waiter whose key is satisfied: an idempotent CAS
-- on the token its page read saw.
UPDATE work_item
SET state = 'pending',
    run_after = GREATEST(run_after, NOW(6)),
    lease_token = lease_token + 1,
    updated_at = NOW(6)
WHERE work_id = sqlc.arg(work_id)
  AND lease_token = sqlc.arg(lease_token)
  AND state = 'waiting_dependency';
