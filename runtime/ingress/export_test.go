package ingress

import "time"

// SetBeforeCommit installs a fault injection point: fn runs inside every
// materializing transaction after its last statement, before its commit.
func (r *Router) SetBeforeCommit(fn func(receiptIDs []int64)) { r.beforeCommit = fn }

// SetIdle installs an observation point: fn runs each time a class loop,
// its turn having found nothing, starts to sleep for d. Set it before Run.
func (r *Router) SetIdle(fn func(class string, d time.Duration)) { r.idle = fn }
