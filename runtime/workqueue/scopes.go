package workqueue

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/laneq/laneq/gen"
	"github.com/laneq/laneq/internal/store"
)

// MaxScopesPerStatement is how many scope ids one statement of the
// many-scope methods below carries (a batch of primary-key point gets);
// longer lists are split.
const MaxScopesPerStatement = 1000

// ScopeMark is what moves on a scope row when work may have become
// claimable in a scope that had no live work: every enqueue and replay
// advances NextOrdinal; a generation move and a pause or resume rewrite
// UpdatedAt. Two marks of one scope are Equal when none of that happened
// between the reads.
type ScopeMark struct {
	Scope       string
	Generation  int64
	NextOrdinal int64
	UpdatedAt   time.Time
}

// Equal reports whether m and o are the same mark.
func (m ScopeMark) Equal(o ScopeMark) bool {
	return m.Scope == o.Scope && m.Generation == o.Generation && m.NextOrdinal == o.NextOrdinal && m.UpdatedAt.Equal(o.UpdatedAt)
}

// scopeChunks splits scopes into runs of at most MaxScopesPerStatement, after
// checking every id.
func scopeChunks(scopes []string) ([][]string, error) {
	for _, s := range scopes {
		if err := validScope(s); err != nil {
			return nil, err
		}
	}
	return slices.Collect(slices.Chunk(scopes, MaxScopesPerStatement)), nil
}

// ScopeMarks reads the marks of the listed scopes, in scope order; scopes
// without a row are left out. One statement per MaxScopesPerStatement ids.
func (qu *Queue) ScopeMarks(ctx context.Context, scopes []string) ([]ScopeMark, error) {
	chunks, err := scopeChunks(scopes)
	if err != nil {
		return nil, err
	}
	var out []ScopeMark
	for _, c := range chunks {
		rows, err := qu.q.ScopeMarks(ctx, c)
		if err != nil {
			return nil, fmt.Errorf("workqueue: read the marks of %d scopes: %w", len(c), err)
		}
		for _, r := range rows {
			out = append(out, ScopeMark{Scope: r.ScopeID, Generation: r.ActiveGeneration, NextOrdinal: r.NextEnqueueOrdinal, UpdatedAt: r.UpdatedAt})
		}
	}
	slices.SortFunc(out, func(a, b ScopeMark) int { return strings.Compare(a.Scope, b.Scope) })
	return out, nil
}

// MaxScopePrefix bounds a scope prefix (a scope id is at most 128 bytes).
const MaxScopePrefix = 127

// ValidScopePrefix checks a scope prefix: printable ASCII, at most
// MaxScopePrefix bytes; "" matches every scope.
func ValidScopePrefix(prefix string) error {
	if len(prefix) > MaxScopePrefix {
		return invalidf("scope prefix must be at most %d bytes, got %d", MaxScopePrefix, len(prefix))
	}
	for i := 0; i < len(prefix); i++ {
		if prefix[i] < 0x20 || prefix[i] > 0x7e {
			return invalidf("scope prefix must be printable ASCII, got byte 0x%02x at %d", prefix[i], i)
		}
	}
	return nil
}

// prefixEnd is the smallest string above every scope id starting with
// prefix: scope ids are printable ASCII (at most 0x7e), so the prefix with
// its last byte raised by one, or "\x7f" for the empty prefix.
func prefixEnd(prefix string) string {
	if prefix == "" {
		return "\x7f"
	}
	return prefix[:len(prefix)-1] + string(rune(prefix[len(prefix)-1]+1))
}

// ScopeMarksWithPrefix reads the marks of every scope whose id starts with
// prefix, in scope order: the primary key's range, one statement per
// MaxScopesPerStatement scopes.
func (qu *Queue) ScopeMarksWithPrefix(ctx context.Context, prefix string) ([]ScopeMark, error) {
	if err := ValidScopePrefix(prefix); err != nil {
		return nil, err
	}
	from, before := prefix, prefixEnd(prefix)
	var out []ScopeMark
	for {
		rows, err := qu.q.ScopeMarksInRange(ctx, gen.ScopeMarksInRangeParams{FromScopeID: from, BeforeScopeID: before, Limit: MaxScopesPerStatement})
		if err != nil {
			return nil, fmt.Errorf("workqueue: read the marks of scopes with prefix %q: %w", prefix, err)
		}
		for _, r := range rows {
			out = append(out, ScopeMark{Scope: r.ScopeID, Generation: r.ActiveGeneration, NextOrdinal: r.NextEnqueueOrdinal, UpdatedAt: r.UpdatedAt})
		}
		if len(rows) < MaxScopesPerStatement {
			return out, nil
		}
		from = rows[len(rows)-1].ScopeID + "\x00" // the next id in key order
	}
}

// ScopeLive reads scope's mark and whether its active generation has live
// work (pending, blocked, processing, waiting on a dependency or inactive;
// dead and finished items do not count). Two statements: the scope row,
// then at most one index entry per live state. Work that becomes live
// after the mark was read moves the mark.
func (qu *Queue) ScopeLive(ctx context.Context, scope string) (ScopeMark, bool, error) {
	if err := validScope(scope); err != nil {
		return ScopeMark{}, false, err
	}
	marks, err := qu.ScopeMarks(ctx, []string{scope})
	if err != nil {
		return ScopeMark{}, false, err
	}
	if len(marks) == 0 {
		return ScopeMark{}, false, fmt.Errorf("%w: %q", ErrUnknownScope, scope)
	}
	mark := marks[0]
	rows, err := qu.q.AnyLiveWork(ctx, gen.AnyLiveWorkParams{ScopeID: scope, Generation: mark.Generation})
	if err != nil {
		return mark, false, fmt.Errorf("workqueue: live work of scope %q: %w", scope, err)
	}
	return mark, len(rows) > 0, nil
}

// RegisterWakeEndpointForScopes registers e for every listed scope that
// exists (RegisterWakeEndpoint, one statement per MaxScopesPerStatement
// scopes): one process's endpoint serving many scopes.
func (qu *Queue) RegisterWakeEndpointForScopes(ctx context.Context, scopes []string, e WakeEndpoint, ttl time.Duration) error {
	chunks, err := scopeChunks(scopes)
	if err != nil {
		return err
	}
	process, err := e.registration(ttl)
	if err != nil {
		return err
	}
	for _, c := range chunks {
		if _, err := qu.q.RegisterWakeEndpointForScopes(ctx, gen.RegisterWakeEndpointForScopesParams{
			EndpointID: e.ID, Address: e.Address, WakeKey: e.Key, TTLMicros: store.Micros(ttl), Process: process, ScopeIds: c,
		}); err != nil {
			return fmt.Errorf("workqueue: register wake endpoint %q for %d scopes: %w", e.ID, len(c), err)
		}
	}
	return nil
}

// RenewWakeEndpointForScopes moves the expiry of the endpoint's rows of the
// listed scopes (RenewWakeEndpoint for many scopes); all is false when
// some row was gone, and the caller registers again.
func (qu *Queue) RenewWakeEndpointForScopes(ctx context.Context, scopes []string, endpointID string, ttl time.Duration, process *ProcessInfo) (all bool, err error) {
	chunks, err := scopeChunks(scopes)
	if err != nil {
		return false, err
	}
	doc, err := processJSON(process)
	if err != nil {
		return false, err
	}
	all = true
	for _, c := range chunks {
		n, err := qu.q.RenewWakeEndpointForScopes(ctx, gen.RenewWakeEndpointForScopesParams{TTLMicros: store.Micros(ttl), Process: doc, ScopeIds: c, EndpointID: endpointID})
		if err != nil {
			return false, fmt.Errorf("workqueue: renew wake endpoint %q for %d scopes: %w", endpointID, len(c), err)
		}
		all = all && n == int64(len(c))
	}
	return all, nil
}

// RemoveWakeEndpointForScopes deletes the endpoint's rows of the listed
// scopes.
func (qu *Queue) RemoveWakeEndpointForScopes(ctx context.Context, scopes []string, endpointID string) error {
	chunks, err := scopeChunks(scopes)
	if err != nil {
		return err
	}
	for _, c := range chunks {
		if _, err := qu.q.RemoveWakeEndpointForScopes(ctx, gen.RemoveWakeEndpointForScopesParams{ScopeIds: c, EndpointID: endpointID}); err != nil {
			return fmt.Errorf("workqueue: remove wake endpoint %q of %d scopes: %w", endpointID, len(c), err)
		}
	}
	return nil
}

// SweepWakeEndpointsForScopes deletes up to limit endpoints of each run of
// MaxScopesPerStatement listed scopes that expired more than grace ago.
func (qu *Queue) SweepWakeEndpointsForScopes(ctx context.Context, scopes []string, grace time.Duration, limit int32) (int64, error) {
	chunks, err := scopeChunks(scopes)
	if err != nil {
		return 0, err
	}
	var swept int64
	for _, c := range chunks {
		n, err := qu.q.SweepExpiredWakeEndpointsForScopes(ctx, gen.SweepExpiredWakeEndpointsForScopesParams{ScopeIds: c, GraceMicros: store.Micros(grace), Limit: limit})
		swept += n
		if err != nil {
			return swept, fmt.Errorf("workqueue: sweep expired wake endpoints of %d scopes: %w", len(c), err)
		}
	}
	return swept, nil
}
