// Package loadgen is the HTTP/1.1 load generator of the benchmarks that
// send webhooks to the ingest over loopback (BenchmarkIngestVsRaw in
// ingest/, the ingest measurements of `jetloop bench`).
//
// The sender is the load, not what is measured, but it runs in the
// process it measures, on the same cores: so it writes its requests as a
// load generator such as wrk does, without a client library (net/http's
// client, which hey sends through, costs about twice as much CPU a
// request in the ingest benchmark). A Conn is one keep-alive TCP
// connection of one worker; a Request is built once (request line, headers and
// body), and each request is written with one writev from those bytes and
// the one header value that changes per request (a delivery id). The
// answer is read with a bufio.Reader: the status line, the framing
// headers (Content-Length, Transfer-Encoding, Connection), and the body,
// of which only the start is kept.
//
// It owns only what the ingest answers: answers framed by Content-Length
// (or without a body), on HTTP/1.1 or HTTP/1.0, interim 1xx answers
// skipped, `Connection: close` honoured by dialling again. A connection
// the server closed while it was idle is found before the next request
// is written (a peek that does not wait) and dialled again; a request
// once written is never sent again, so a request the server read and did
// not answer is an error, never counted as answered. A chunked or
// connection-delimited answer, an upgrade or a malformed answer is an
// error that says what came. It does not do TLS, redirects, proxies,
// cookies, compression, HTTP/2 or pipelining, and it is not safe for use
// by more than one goroutine at a time (one Conn per worker).
package loadgen
