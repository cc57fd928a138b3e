package admission

// QueuedRecordCalls returns how many callers' records wait behind a
// write of records in flight.
func (a *Admitter) QueuedRecordCalls() int {
	a.audit.mu.Lock()
	defer a.audit.mu.Unlock()
	return len(a.audit.queue)
}
