package tools

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"
)

const httpGetSchema = `{
	"type": "object",
	"properties": {
		"url": {"type": "string", "minLength": 1, "maxLength": 8192, "description": "An http or https URL."},
		"headers": {
			"type": "object",
			"description": "Request headers, name to value.",
			"additionalProperties": {"type": "string", "maxLength": 8192},
			"maxProperties": 50
		}
	},
	"required": ["url"],
	"additionalProperties": false
}`

const httpRequestSchema = `{
	"type": "object",
	"properties": {
		"method": {"type": "string", "enum": ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]},
		"url": {"type": "string", "minLength": 1, "maxLength": 8192, "description": "An http or https URL."},
		"headers": {
			"type": "object",
			"description": "Request headers, name to value.",
			"additionalProperties": {"type": "string", "maxLength": 8192},
			"maxProperties": 50
		},
		"body": {"type": "string", "maxLength": 1000000, "description": "The request body, sent as is."}
	},
	"required": ["method", "url"],
	"additionalProperties": false
}`

// Bounds of the response summary.
const (
	maxHeaderLines = 40
	maxHeaderValue = 256
	maxRedirects   = 5
)

// httpTool is http_get (replay-safe, no body) or http_request (any method,
// not replay-safe). A response of any status is a result; IsError means
// that no response was received.
type httpTool struct {
	get     bool
	client  *http.Client
	timeout time.Duration
	maxBody int
}

func (h *httpTool) Spec() Spec {
	if h.get {
		return Spec{
			Name: "http_get",
			Description: "Fetch a URL with HTTP GET and return the status line, the response headers and the body " +
				fmt.Sprintf("(text only, at most %d bytes). Only http and https URLs are allowed.", h.maxBody),
			Schema:     json.RawMessage(httpGetSchema),
			ReplaySafe: true,
			State:      Stateless,
			Timeout:    h.timeout,
		}
	}
	return Spec{
		Name: "http_request",
		Description: "Send an HTTP request with any method, headers and body, and return the status line, the response headers and the body " +
			fmt.Sprintf("(text only, at most %d bytes). Only http and https URLs are allowed. Use http_get to read.", h.maxBody),
		Schema:     json.RawMessage(httpRequestSchema),
		ReplaySafe: false,
		State:      Resource,
		Timeout:    h.timeout,
	}
}

func (h *httpTool) Call(ctx context.Context, call Call) (Result, error) {
	var args struct {
		Method  string            `json:"method"`
		URL     string            `json:"url"`
		Headers map[string]string `json:"headers"`
		Body    string            `json:"body"`
	}
	if err := json.Unmarshal(call.Args, &args); err != nil {
		return Result{}, fmt.Errorf("%s: arguments: %w", h.Spec().Name, err)
	}
	if h.get {
		args.Method = http.MethodGet
	}
	u, err := url.Parse(args.URL)
	if err != nil {
		return errResult("url %q: %v", args.URL, err), nil
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return errResult("url %q: scheme %q is not allowed; use http or https", args.URL, u.Scheme), nil
	}
	if u.Host == "" {
		return errResult("url %q has no host", args.URL), nil
	}
	var body io.Reader
	if args.Body != "" {
		body = strings.NewReader(args.Body)
	}
	req, err := http.NewRequestWithContext(ctx, args.Method, u.String(), body)
	if err != nil {
		return errResult("request %s %s: %v", args.Method, args.URL, err), nil
	}
	for k, v := range args.Headers {
		if strings.EqualFold(k, "Host") {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
	}
	if req.Header.Get("User-Agent") == "" {
		req.Header.Set("User-Agent", "jetloop")
	}
	resp, err := h.client.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return Result{IsError: true, Content: fmt.Sprintf("%s %s: stopped: %v", args.Method, args.URL, context.Cause(ctx))}, nil
		}
		return errResult("%s %s: %v", args.Method, args.URL, err), nil
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, int64(h.maxBody)+1))
	truncated := len(data) > h.maxBody
	if truncated {
		data = data[:h.maxBody]
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s\n", resp.Proto, resp.Status)
	writeHeaders(&b, resp.Header)
	b.WriteByte('\n')
	switch {
	case len(data) == 0:
	case !isText(data, truncated):
		fmt.Fprintf(&b, "[binary body of %d bytes (Content-Type %q) not shown]\n", len(data), resp.Header.Get("Content-Type"))
	default:
		b.Write(data)
		if data[len(data)-1] != '\n' {
			b.WriteByte('\n')
		}
	}
	if truncated {
		fmt.Fprintf(&b, "[body truncated at %d bytes]\n", h.maxBody)
	}
	if err != nil {
		fmt.Fprintf(&b, "[body cut short: %v]\n", err)
	}
	return Result{Content: b.String()}, nil
}

func errResult(format string, args ...any) Result {
	return Result{IsError: true, Content: fmt.Sprintf(format, args...)}
}

// writeHeaders writes a bounded summary of h, one header a line, sorted.
func writeHeaders(b *strings.Builder, h http.Header) {
	keys := make([]string, 0, len(h))
	for k := range h {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	n := 0
	for _, k := range keys {
		for _, v := range h[k] {
			if n == maxHeaderLines {
				fmt.Fprintf(b, "[… more headers not shown]\n")
				return
			}
			if len(v) > maxHeaderValue {
				v = cutRunes(v, maxHeaderValue) + "…"
			}
			fmt.Fprintf(b, "%s: %s\n", k, v)
			n++
		}
	}
}

// isText reports whether a body is UTF-8 text without NULs; a truncated
// body may end inside a rune.
func isText(data []byte, truncated bool) bool {
	if truncated {
		data = data[:max(0, len(data)-utf8.UTFMax)]
	}
	return utf8.Valid(data) && !bytes.ContainsRune(data, 0)
}

// errForbiddenAddress refuses a connection to a non-public address.
var errForbiddenAddress = errors.New("address not allowed")

// newHTTPClient builds the client of the HTTP tools: no proxy, a bounded
// number of redirects and, unless allowPrivate, no connection to loopback,
// private, link-local (cloud metadata), unspecified or any other
// special-purpose address (see special). The check
// runs on the resolved address of every connection, redirects included.
func newHTTPClient(allowPrivate bool) *http.Client {
	d := &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}
	if !allowPrivate {
		d.Control = func(_, address string, _ syscall.RawConn) error {
			ap, err := netip.ParseAddrPort(address)
			if err != nil {
				return fmt.Errorf("%w: %s: %v", errForbiddenAddress, address, err)
			}
			if a := ap.Addr().Unmap(); !publicAddr(a) {
				return fmt.Errorf("%w: %s is not a public address (%s)", errForbiddenAddress, a, specialBlock(a))
			}
			return nil
		}
	}
	t := &http.Transport{
		Proxy:                  nil,
		DialContext:            d.DialContext,
		ForceAttemptHTTP2:      true,
		MaxIdleConns:           100,
		MaxIdleConnsPerHost:    4,
		IdleConnTimeout:        90 * time.Second,
		TLSHandshakeTimeout:    10 * time.Second,
		ResponseHeaderTimeout:  30 * time.Second,
		MaxResponseHeaderBytes: 256 << 10,
	}
	return &http.Client{
		Transport: t,
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			if len(via) >= maxRedirects {
				return fmt.Errorf("stopped after %d redirects", maxRedirects)
			}
			if req.URL.Scheme != "http" && req.URL.Scheme != "https" {
				return fmt.Errorf("redirect to %q: scheme not allowed", req.URL)
			}
			return nil
		},
	}
}
