package ingress

// SetBeforeCommit installs a fault injection point: fn runs inside every
// materializing transaction after its last statement, before its commit.
func (r *Router) SetBeforeCommit(fn func(receiptIDs []int64)) { r.beforeCommit = fn }
