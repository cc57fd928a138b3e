// Package model is the one interface the worker calls a language model
// through, and its providers: scripted (a deterministic script, for tests,
// benchmarks and the demo), anthropic (the Messages API) and openai (Chat
// Completions, which Ollama, vLLM and llama.cpp servers also speak).
//
// A provider makes one call: it honours ctx (a cancel aborts the HTTP
// request at once), retries 429 and 5xx with backoff and Retry-After, and
// reports usage and cost. It keeps nothing between calls: the transcript in
// the Request is the whole conversation, and partial streams never leave
// the call. It does not persist anything; the worker does.
package model
