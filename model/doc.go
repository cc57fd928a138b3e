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
//
// # Choosing a provider
//
// New reads a definition's model section (policies.Model) and returns the
// provider its provider field names. Functional options set what a
// definition does not: the HTTP client, how API keys are looked up, the
// number of attempts and the backoff, the response size bound, the logger
// and a price overriding the list price table. WithMetrics reports calls,
// attempts, durations, tokens and cost to Prometheus (see NewMetrics), by
// agent (the one WithAgent names in a call's context), provider and model;
// retries are logged with slog at warning level.
//
// # Failures
//
// Every failure is an *Error whose Kind is one of ErrRateLimited,
// ErrServer, ErrTimeout, ErrBadRequest or ErrBadResponse, to branch on
// with errors.Is; a call ended by the caller's ctx returns ctx's error in
// the chain instead. The timeout of a definition (default 2 minutes)
// bounds each HTTP attempt; the caller's ctx bounds the whole call. A call
// is tried up to 4 times: 408, 429, 5xx, refused connections, attempts that
// timed out and bodies cut off mid-way are retried after an exponential
// backoff with jitter (500 ms doubling, at most 30 s) or after the
// server's Retry-After (seconds, an HTTP date, or retry-after-ms). A
// Retry-After longer than 60 s is not waited out: the call fails at once
// with ErrRateLimited and the pause in Error.RetryAfter, for the caller to
// schedule. Other 4xx answers (a bad request, a bad key) and complete
// answers that cannot be parsed are never retried. Response bodies are
// bounded (16 MiB).
//
// # Usage and cost
//
// Response.Usage counts input tokens (for anthropic including cache reads
// and writes) and output tokens, and prices them: Cost looks the model
// that answered up in a table of list prices in US dollars per million
// tokens, accepting dated snapshots such as claude-sonnet-4-5-20250929. A
// model the table does not know, such as a local one, costs 0; WithPrice
// sets its price.
//
// # The scripted model
//
// One script entry answers one model call, in order, per session. The
// position is the number of assistant messages already in the request, so
// a restarted worker continues a session where it was, and a model call
// made again after a crash gets the answer it got before. Tool call ids
// are "call_<position>_<index>". An entry may delay its answer (a cancel
// returns at once) or fail with error: rate_limited, server_error or
// timeout; since a failed call adds nothing to the transcript, every call
// at that position fails alike. After the last entry, calls are answered
// by then, or by the last entry's text without tool calls. A script naming
// a model of the price table (name: claude-sonnet-4-5) is priced like it,
// so a rehearsal exercises cost budgets.
//
// # Anthropic
//
//	model:
//	  provider: anthropic
//	  name: claude-sonnet-4-5
//	  max_tokens: 4096          # default 8192; the API requires a bound
//	                            # (claude-3 opus and haiku allow 4096 at most)
//	  timeout: 90s
//
// The key is read from ANTHROPIC_API_KEY, or the variable api_key_env
// names, when the provider is made; a missing key is an error then, not at
// the first call. base_url replaces https://api.anthropic.com for a proxy
// or gateway; the call goes to {base_url}/v1/messages.
//
// # OpenAI, Ollama, vLLM, llama.cpp
//
// base_url is the API root with its version path, as the OpenAI SDKs take
// it; the call goes to {base_url}/chat/completions. Without base_url the
// provider calls https://api.openai.com/v1 and needs OPENAI_API_KEY (or
// the variable api_key_env names). With a base_url and no key set, it
// sends no Authorization header, which is what local servers expect; a
// server that wants a key gets it from api_key_env. A local server has no
// default model: name the one it serves.
//
// Ollama (ollama serve; ollama pull llama3.1:8b):
//
//	model:
//	  provider: openai
//	  base_url: http://localhost:11434/v1   # http://localhost:11434 works too
//	  name: llama3.1:8b
//	  timeout: 5m                           # local models load slowly at first
//
// vLLM (vllm serve Qwen/Qwen2.5-7B-Instruct --enable-auto-tool-choice
// --tool-call-parser hermes): base_url http://localhost:8000/v1, name the
// served model. llama.cpp (llama-server --jinja -m model.gguf): base_url
// http://localhost:8080/v1. Tools need a model and server with tool
// calling enabled; tool calls such servers send without ids get
// "call_<position>_<index>", like the scripted model's.
//
// Differences the provider smooths over: on api.openai.com the response
// bound is sent as max_completion_tokens (which newer OpenAI models
// require), elsewhere as max_tokens (which local servers read); a failed
// tool result, which Chat Completions cannot flag, is sent with its
// content prefixed "Error: ".
package model
