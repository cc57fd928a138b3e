package api

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetloop/jetloop/streams"
)

// Bounds of blob pages.
const (
	// DefaultBlobPage is what a blob request without a limit reads;
	// MaxBlobPage the most one may ask for.
	DefaultBlobPage = 256 << 10
	MaxBlobPage     = 1 << 20
)

// BlobResponse is one page of a blob of a session: a tool result too
// large for the transcript, kept in jl_blobs.
type BlobResponse struct {
	Handle string `json:"handle"`
	// Offset is where the page starts, Size the blob's whole size, and
	// Next where the next page starts (0: this is the last).
	Offset int64 `json:"offset"`
	Size   int64 `json:"size"`
	Next   int64 `json:"next,omitempty"`
	// Text is the page, never cut inside a character.
	Text string `json:"text"`
}

// query parses r's query, refusing a parameter not among allowed and one
// given twice.
func query(r *http.Request, allowed ...string) (url.Values, error) {
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return nil, errorf(http.StatusBadRequest, "query: %v", err)
	}
	for k, vs := range q {
		switch {
		case !slices.Contains(allowed, k):
			return nil, errorf(http.StatusBadRequest, "unknown query parameter %q: want %s", k, strings.Join(allowed, ", "))
		case len(vs) > 1:
			return nil, errorf(http.StatusBadRequest, "query parameter %q given %d times", k, len(vs))
		}
	}
	return q, nil
}

// number reads a non-negative whole number parameter; absent is 0.
func number(q url.Values, name string) (int64, error) {
	v := q.Get(name)
	if v == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return 0, errorf(http.StatusBadRequest, "query parameter %s=%q: want a whole number, 0 or more", name, v)
	}
	return n, nil
}

// since reads a time parameter: RFC 3339, or a duration back from now
// ("1h").
func since(q url.Values, name string) (time.Time, error) {
	v := q.Get(name)
	if v == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339, v); err == nil {
		return t, nil
	}
	if d, err := time.ParseDuration(v); err == nil && d > 0 {
		return time.Now().Add(-d), nil
	}
	return time.Time{}, errorf(http.StatusBadRequest, "query parameter %s=%q: want an RFC 3339 time or a duration such as 1h", name, v)
}

func (s *Service) httpSessions(ctx context.Context, r *http.Request, _ []byte) (int, any, error) {
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return 0, nil, errorf(http.StatusBadRequest, "query: %v", err)
	}
	for k, vs := range q {
		switch {
		case k != "agent" && k != "status" && k != "since" && k != "limit" && k != "cursor":
			return 0, nil, errorf(http.StatusBadRequest, "unknown query parameter %q: want agent, status, since, limit or cursor", k)
		case len(vs) > 1:
			return 0, nil, errorf(http.StatusBadRequest, "query parameter %q given %d times", k, len(vs))
		}
	}
	req := StatusRequest{Agent: q.Get("agent"), Status: q.Get("status")}
	if v := q.Get("since"); v != "" {
		if req.Since, err = time.Parse(time.RFC3339Nano, v); err != nil {
			return 0, nil, errorf(http.StatusBadRequest, "since %q: want an RFC 3339 time", v)
		}
	}
	if v := q.Get("limit"); v != "" {
		if req.Limit, err = strconv.Atoi(v); err != nil || req.Limit < 1 {
			return 0, nil, errorf(http.StatusBadRequest, "limit %q: want a positive number", v)
		}
	}
	if v := q.Get("cursor"); v != "" {
		if req.Cursor, err = strconv.ParseUint(v, 10, 64); err != nil {
			return 0, nil, errorf(http.StatusBadRequest, "cursor %q: want the next of the previous page", v)
		}
	}
	resp, err := s.status(ctx, req)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, resp, nil
}

func (s *Service) httpShow(ctx context.Context, r *http.Request, _ []byte) (int, any, error) {
	q, err := query(r, "from", "limit")
	if err != nil {
		return 0, nil, err
	}
	from, err := number(q, "from")
	if err != nil {
		return 0, nil, err
	}
	limit, err := number(q, "limit")
	if err != nil {
		return 0, nil, err
	}
	if limit > MaxShowLimit {
		return 0, nil, errorf(http.StatusBadRequest, "query parameter limit=%d: at most %d", limit, MaxShowLimit)
	}
	resp, err := s.show(ctx, ShowRequest{Agent: r.PathValue("agent"), Session: r.PathValue("session"), From: uint64(from), Limit: int(limit)})
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, resp, nil
}

func (s *Service) httpContext(ctx context.Context, r *http.Request, _ []byte) (int, any, error) {
	if _, err := query(r); err != nil {
		return 0, nil, err
	}
	resp, err := s.sessionContext(ctx, ContextRequest{Agent: r.PathValue("agent"), Session: r.PathValue("session")})
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, resp, nil
}

// httpBlob reads a page of one of the session's blobs: a handle of
// another session is refused, as read_blob refuses it.
func (s *Service) httpBlob(ctx context.Context, r *http.Request, _ []byte) (int, any, error) {
	ref, err := sessionRef(r.PathValue("agent"), r.PathValue("session"))
	if err != nil {
		return 0, nil, err
	}
	q, err := query(r, "offset", "limit")
	if err != nil {
		return 0, nil, err
	}
	offset, err := number(q, "offset")
	if err != nil {
		return 0, nil, err
	}
	limit, err := number(q, "limit")
	if err != nil {
		return 0, nil, err
	}
	switch {
	case limit == 0:
		limit = DefaultBlobPage
	case limit > MaxBlobPage:
		return 0, nil, errorf(http.StatusBadRequest, "query parameter limit=%d: at most %d", limit, MaxBlobPage)
	}
	handle := r.PathValue("handle")
	if owner, err := s.names.ParseSessionKey(handle); err != nil || owner.Agent != ref.Agent || owner.Session != ref.Session {
		return 0, nil, errorf(http.StatusNotFound, "blob %q: not a blob of %s", handle, ref)
	}
	page, err := s.readBlob(ctx, handle, offset, limit)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, page, nil
}

// readBlob reads limit bytes of blob handle from offset.
func (s *Service) readBlob(ctx context.Context, handle string, offset, limit int64) (BlobResponse, error) {
	store, err := s.js.ObjectStore(ctx, s.names.ObjectBlobs())
	if err != nil {
		return BlobResponse{}, fmt.Errorf("api: open %s: %w", s.names.ObjectBlobs(), err)
	}
	o, err := store.Get(ctx, handle)
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return BlobResponse{}, errorf(http.StatusNotFound, "no blob %q", handle)
	}
	if err != nil {
		return BlobResponse{}, fmt.Errorf("api: get blob %q: %w", handle, err)
	}
	defer o.Close()
	info, err := o.Info()
	if err != nil {
		return BlobResponse{}, fmt.Errorf("api: blob %q: %w", handle, err)
	}
	size := int64(info.Size)
	if offset > size || offset > 0 && offset == size {
		return BlobResponse{}, errorf(http.StatusBadRequest, "blob %q: offset %d is past its end (%d bytes)", handle, offset, size)
	}
	if _, err := io.CopyN(io.Discard, o, offset); err != nil {
		return BlobResponse{}, fmt.Errorf("api: blob %q: seek to %d: %w", handle, offset, err)
	}
	buf := make([]byte, min(limit, size-offset))
	if _, err := io.ReadFull(o, buf); err != nil {
		return BlobResponse{}, fmt.Errorf("api: blob %q: read at %d: %w", handle, offset, err)
	}
	if offset+int64(len(buf)) < size {
		// Never end inside a character: the next page starts with it.
		for i := 1; i <= utf8.UTFMax && i <= len(buf); i++ {
			if utf8.RuneStart(buf[len(buf)-i]) {
				if !utf8.FullRune(buf[len(buf)-i:]) {
					buf = buf[:len(buf)-i]
				}
				break
			}
		}
	}
	out := BlobResponse{Handle: handle, Offset: offset, Size: size, Text: strings.ToValidUTF8(string(buf), "\uFFFD")}
	if end := offset + int64(len(buf)); end < size {
		out.Next = end
	}
	return out, nil
}

func (s *Service) httpAgents(ctx context.Context, r *http.Request, _ []byte) (int, any, error) {
	if _, err := query(r); err != nil {
		return 0, nil, err
	}
	resp, err := s.listAgents(ctx, AgentsRequest{})
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, resp, nil
}

func (s *Service) httpHistory(ctx context.Context, r *http.Request, _ []byte) (int, any, error) {
	if _, err := query(r); err != nil {
		return 0, nil, err
	}
	resp, err := s.history(ctx, HistoryRequest{Agent: r.PathValue("agent")})
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, resp, nil
}

func (s *Service) httpSchedules(ctx context.Context, r *http.Request, _ []byte) (int, any, error) {
	if _, err := query(r); err != nil {
		return 0, nil, err
	}
	resp, err := s.listSchedules(ctx, SchedulesRequest{})
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, resp, nil
}

// httpScheduleAction resumes, suspends or triggers a schedule; a trigger's
// Idempotency-Key is its id.
func (s *Service) httpScheduleAction(ctx context.Context, r *http.Request, body []byte) (int, any, error) {
	if _, err := query(r); err != nil {
		return 0, nil, err
	}
	if _, err := decode[struct{}](body); err != nil {
		return 0, nil, err
	}
	action := r.PathValue("action")
	req := SchedulesRequest{Action: action, Agent: r.PathValue("agent"), Schedule: r.PathValue("schedule")}
	switch action {
	case ScheduleResume, ScheduleSuspend:
	case ScheduleTrigger:
		req.ID = r.Header.Get("Idempotency-Key")
	default:
		return 0, nil, errorf(http.StatusNotFound, "schedules: no action %q (want %s, %s or %s)", action, ScheduleResume, ScheduleSuspend, ScheduleTrigger)
	}
	resp, err := s.listSchedules(ctx, req)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, resp, nil
}

func (s *Service) httpEvents(ctx context.Context, r *http.Request, _ []byte) (int, any, error) {
	q, err := query(r, "agent", "since", "limit")
	if err != nil {
		return 0, nil, err
	}
	from, err := since(q, "since")
	if err != nil {
		return 0, nil, err
	}
	limit, err := number(q, "limit")
	if err != nil {
		return 0, nil, err
	}
	if limit > MaxEvents {
		return 0, nil, errorf(http.StatusBadRequest, "query parameter limit=%d: at most %d", limit, MaxEvents)
	}
	resp, err := s.events(ctx, EventsRequest{Agent: q.Get("agent"), Since: from, Limit: int(limit)})
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, resp, nil
}

func (s *Service) httpDLQ(ctx context.Context, r *http.Request, _ []byte) (int, any, error) {
	q, err := query(r, "reason", "agent", "since", "from", "limit")
	if err != nil {
		return 0, nil, err
	}
	from, err := number(q, "from")
	if err != nil {
		return 0, nil, err
	}
	limit, err := number(q, "limit")
	if err != nil {
		return 0, nil, err
	}
	t, err := since(q, "since")
	if err != nil {
		return 0, nil, err
	}
	if err := checkAgentFilter(q.Get("agent")); err != nil {
		return 0, nil, err
	}
	resp, err := s.deadLetters(ctx, DLQRequest{Reason: q.Get("reason"), Agent: q.Get("agent"), Since: t, From: uint64(from), Limit: int(limit)})
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, resp, nil
}

func letterSeq(r *http.Request) (uint64, error) {
	seq, err := strconv.ParseUint(r.PathValue("seq"), 10, 64)
	if err != nil || seq == 0 {
		return 0, errorf(http.StatusBadRequest, "dead letter %q: want its JL_DLQ sequence, a whole number from 1", r.PathValue("seq"))
	}
	return seq, nil
}

func (s *Service) httpDLQShow(ctx context.Context, r *http.Request, _ []byte) (int, any, error) {
	if _, err := query(r); err != nil {
		return 0, nil, err
	}
	seq, err := letterSeq(r)
	if err != nil {
		return 0, nil, err
	}
	resp, err := s.deadLetters(ctx, DLQRequest{Action: DLQShow, Seqs: []uint64{seq}})
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, resp, nil
}

func (s *Service) httpDLQRedrive(ctx context.Context, r *http.Request, body []byte) (int, any, error) {
	if _, err := query(r); err != nil {
		return 0, nil, err
	}
	if _, err := decode[struct{}](body); err != nil {
		return 0, nil, err
	}
	seq, err := letterSeq(r)
	if err != nil {
		return 0, nil, err
	}
	resp, err := s.deadLetters(ctx, DLQRequest{Action: DLQRedrive, Seqs: []uint64{seq}})
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, resp, nil
}

// sessionOf names the session of a stream filter, or none.
func sessionOf(agent, session string) (streams.SessionRef, error) {
	if session == "" {
		return streams.SessionRef{}, nil
	}
	if agent == "" {
		return streams.SessionRef{}, errorf(http.StatusBadRequest, "query parameter session needs agent")
	}
	return sessionRef(agent, session)
}
