package record

import (
	"context"
	"testing"
	"time"

	"github.com/jetloop/jetloop/streams"
)

// A session's child keys name its children: Children reads their states
// and skips the ones without a state and the ones another session
// started.
func TestChildren(t *testing.T) {
	s, parent := testStore(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	now := time.Now().UTC()
	mk := func(agent, session, by string) streams.SessionRef {
		ref, err := streams.NewSessionRef(agent, session)
		if err != nil {
			t.Fatal(err)
		}
		if by != "-" {
			st := NewState(agent, session, now)
			st.Delegation = &Delegation{Parent: by, CallID: "call"}
			if _, err := s.Create(ctx, ref, st); err != nil {
				t.Fatal(err)
			}
		}
		return ref
	}
	b := mk("rev", parent.String()+"/call_b", parent.String())
	a := mk("rev", parent.String()+"/call_a", parent.String())
	gone := mk("rev", parent.String()+"/call_gone", "-")
	stranger := mk("x", "y", "other/s")
	for _, c := range []streams.SessionRef{b, a, gone, stranger} {
		if err := s.NoteChild(ctx, parent, c, "call"); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.NoteChild(ctx, parent, a, "call"); err != nil {
		t.Fatal("noting a child again: ", err)
	}
	refs, err := ChildRefs(ctx, s.js, s.names, parent)
	if err != nil || len(refs) != 4 {
		t.Fatalf("child refs %v, %v", refs, err)
	}
	got, err := Children(ctx, s.js, s.names, parent)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Session != a.Session || got[1].Session != b.Session || got[0].DelegatedBy != parent.String() {
		t.Fatalf("children %+v", got)
	}
	if none, err := Children(ctx, s.js, s.names, a); err != nil || len(none) != 0 {
		t.Fatalf("children of a session that delegated nothing: %+v, %v", none, err)
	}
}
