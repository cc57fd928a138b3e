package admission

import "time"

// QueuedRecordCalls returns how many callers' records wait behind a
// write of records in flight.
func (a *Admitter) QueuedRecordCalls() int {
	a.audit.mu.Lock()
	defer a.audit.mu.Unlock()
	return len(a.audit.queue)
}

// SetMaxRecordWait sets the longest wait of a's writes of records for
// an acknowledgement (maxRecordWait) to d. Call it before a's first
// write.
func (a *Admitter) SetMaxRecordWait(d time.Duration) { a.audit.wait = d }
