// Package dlq owns dead letters: what could not be admitted or applied,
// kept in JL_DLQ with the reason, so nothing is dropped without a record
// of why.
//
// A dead letter is published on jl.dlq.<reason>, where reason is one of
// the Reason codes (the subject carries it, so `jetloop dlq ls --reason R`
// is a subject filter); it keeps the original message's data and headers
// (the server's Nats-* headers, which a client may not publish or which
// the server would act on, under Jl-Orig- names) and adds Jl-Dlq-Reason,
// Jl-Dlq-Detail (what went wrong, in words), Jl-Dlq-Subject and
// Jl-Dlq-Seq (where the original was, when it was in a stream).
//
// List and Get read them back; Redrive puts a worker's dead letter back on
// the subject it came from, under its original event id, once: a second
// redrive of the same letter is answered with the first's sequence, in
// the stream's duplicate window and after it (jl_dedupe). Dead letters of
// admission (a rule that did not evaluate) are redriven through admission
// again by the ingest, which owns that pipeline.
//
// It does not decide what is dead-lettered (admission/ and worker/ do)
// and does not consume JL_DLQ: letters stay until the stream's limits or
// an operator remove them.
package dlq
