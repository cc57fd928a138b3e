package ledger_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/jetloop/jetloop/internal/natstest"
	"github.com/jetloop/jetloop/ledger"
	"github.com/jetloop/jetloop/streams"
)

func open(t *testing.T) *ledger.Store {
	t.Helper()
	srv := natstest.RunServer(t)
	_, js := natstest.Connect(t, srv.ClientURL())
	ctx := context.Background()
	if _, err := streams.Provision(ctx, js, streams.Options{}); err != nil {
		t.Fatal(err)
	}
	s, err := ledger.Open(ctx, js, streams.Default())
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func ref(t *testing.T, agent, session string) streams.SessionRef {
	t.Helper()
	r, err := streams.NewSessionRef(agent, session)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// Many sessions report to one account at once, each many times and out
// of order: the account counts each session's latest report once.
func TestReportsAreIdempotentAndShared(t *testing.T) {
	ctx := context.Background()
	s := open(t)
	root := ref(t, "impl", "pr-1")
	ceil := ledger.Ceiling{MaxCostUSD: 1}
	if _, err := s.OpenAccount(ctx, root, "in:7", ceil, ledger.Part{Usage: ledger.Usage{Turns: 1, CostUSD: 0.1}, Step: 1}); err != nil {
		t.Fatal(err)
	}
	// Opening again for the same run keeps what is counted.
	if a, err := s.OpenAccount(ctx, root, "in:7", ceil, ledger.Part{}); err != nil || a.Own().CostUSD != 0.1 {
		t.Fatalf("reopen: %+v, %v", a, err)
	}
	var wg sync.WaitGroup
	for c := range 8 {
		who := fmt.Sprintf("rev/pr-1/call_%d", c)
		wg.Go(func() {
			// Steps 1..5, each reported twice, the last step first.
			for _, step := range []uint64{5, 1, 2, 3, 4, 5, 3} {
				p := ledger.Part{Usage: ledger.Usage{Turns: int(step), InputTokens: 10 * int64(step), CostUSD: 0.01 * float64(step)}, Step: step}
				if _, err := s.Report(ctx, root, "in:7", who, p); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	a, err := s.Get(ctx, root)
	if err != nil {
		t.Fatal(err)
	}
	tot := a.Total()
	if len(a.Parts) != 9 || tot.Turns != 1+8*5 || tot.InputTokens != 8*50 {
		t.Fatalf("account: %d parts, total %+v", len(a.Parts), tot)
	}
	if limit, _ := a.Ceiling.Reached(tot, false); limit != "" {
		t.Fatalf("0.5 of 1.0 reported as reached: %s", limit)
	}
	if _, err := s.Report(ctx, root, "in:7", "rev/pr-1/call_0", ledger.Part{Usage: ledger.Usage{CostUSD: 0.6}, Step: 6}); err != nil {
		t.Fatal(err)
	}
	a, _ = s.Get(ctx, root)
	if limit, reason := a.Ceiling.Reached(a.Total(), false); limit != "max_cost_usd" {
		t.Fatalf("1.05 of 1.00 not reached: %q %q", limit, reason)
	}
}

// A report for a run the account no longer counts is refused, and a new
// run's account starts from nothing.
func TestAccountsBelongToOneRun(t *testing.T) {
	ctx := context.Background()
	s := open(t)
	r := ref(t, "impl", "pr-2")
	if _, err := s.Report(ctx, r, "in:1", r.String(), ledger.Part{Step: 1}); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("report without an account: %v", err)
	}
	if _, err := s.OpenAccount(ctx, r, "in:1", ledger.Ceiling{}, ledger.Part{Usage: ledger.Usage{Turns: 3}, Step: 3}); err != nil {
		t.Fatal(err)
	}
	a, err := s.OpenAccount(ctx, r, "in:9", ledger.Ceiling{MaxTurns: 4}, ledger.Part{Step: 0})
	if err != nil || a.Total().Turns != 0 || a.Ceiling.MaxTurns != 4 {
		t.Fatalf("new run's account: %+v, %v", a, err)
	}
	if _, err := s.Report(ctx, r, "in:1", "child/x", ledger.Part{Usage: ledger.Usage{Turns: 1}, Step: 1}); !errors.Is(err, ledger.ErrOtherRun) {
		t.Fatalf("late report of the earlier run: %v", err)
	}
	// Deleted with its session, it is gone, and a new one can open.
	if err := s.Delete(ctx, r); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctx, r); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("deleted account: %v", err)
	}
	if err := s.Delete(ctx, r); err != nil {
		t.Fatalf("second delete: %v", err)
	}
	if a, err := s.OpenAccount(ctx, r, "in:10", ledger.Ceiling{}, ledger.Part{Step: 1}); err != nil || a.Run != "in:10" {
		t.Fatalf("open after delete: %+v, %v", a, err)
	}
}

func TestCeilingLeft(t *testing.T) {
	c := ledger.Ceiling{MaxTurns: 10, MaxCostUSD: 2}
	l := c.Left(ledger.Usage{Turns: 4, InputTokens: 1000, CostUSD: 0.5})
	if l.MaxTurns != 6 || l.MaxTokens != 0 || l.MaxCostUSD != 1.5 {
		t.Fatalf("left: %+v", l)
	}
	if limit, _ := c.Reached(ledger.Usage{Turns: 10}, false); limit != "" {
		t.Fatalf("turns reached for a step that is not a model call: %s", limit)
	}
	if limit, _ := c.Reached(ledger.Usage{Turns: 10}, true); limit != "max_turns" {
		t.Fatalf("turns not reached: %q", limit)
	}
}
