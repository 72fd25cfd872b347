package workqueue

import "github.com/laneq/laneq/internal/store"

// The session check lives in internal/store (New runs it through
// store.New); its errors are these.

// ErrSessionSettings is matched (errors.Is) by every *SessionError.
var ErrSessionSettings = store.ErrSessionSettings

// ErrOptimisticMode is matched by the *SessionError for tidb_txn_mode:
// in TiDB's optimistic mode READ COMMITTED silently becomes REPEATABLE READ,
// and a finishing transaction could miss a concurrent finisher's commit.
var ErrOptimisticMode = store.ErrOptimisticMode

// SessionError names a connection setting laneq cannot work with, what the
// session has and what it needs. New returns one per bad setting, joined.
type SessionError = store.SessionError

// ErrPreReleaseSchema reports tables migrated by a pre-release laneq, whose
// key columns used PAD SPACE collations ('k' and 'k ' the same key). The
// migrations were reworked before the first release and goose records them
// as applied, so schema.Up cannot repair such a database: create it again.
var ErrPreReleaseSchema = store.ErrPreReleaseSchema
