package workqueue

// SetLoadMinRows sets the smallest batch written by a load (a huge value
// writes every row alone, as enqueue did before the loads) until the
// returned restore is called. Not safe beside running enqueues.
func SetLoadMinRows(n int) (restore func()) {
	old := loadMinRows
	loadMinRows = n
	return func() { loadMinRows = old }
}
