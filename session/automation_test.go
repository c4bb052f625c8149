package session_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/google/uuid"

	"github.com/logbook/logbook/session"
)

// An opening's post as the log knows it: nothing, then an attempt about to post (no ts), then
// that attempt's ts; a second attempt's record keeps the first ts; bad input is refused.
func TestOpeningPostsAreTheLogsWord(t *testing.T) {
	t.Parallel()
	st, _ := newStore(t)
	ctx := context.Background()
	const kind, key = "logbook_schedule_tick", "1/1700000000"
	if r, err := st.OpeningPosts(ctx, kind, key); err != nil || r.TS != "" || len(r.Posting) != 0 {
		t.Fatalf("before any attempt: %+v %v", r, err)
	}
	if err := st.RecordPosting(ctx, kind, key, "a1", "C1"); err != nil {
		t.Fatal(err)
	}
	if r, err := st.OpeningPosts(ctx, kind, key); err != nil || r.TS != "" || len(r.Posting) != 1 {
		t.Fatalf("after posting: %+v %v", r, err)
	}
	if err := st.RecordPosted(ctx, kind, key, "a1", "C1", "1.000100"); err != nil {
		t.Fatal(err)
	}
	if err := st.RecordPosting(ctx, kind, key, "a2", "C1"); err != nil {
		t.Fatal(err)
	}
	if err := st.RecordPosted(ctx, kind, key, "a2", "C1", "2.000200"); err != nil {
		t.Fatal(err)
	}
	if r, err := st.OpeningPosts(ctx, kind, key); err != nil || r.TS != "1.000100" || len(r.Posting) != 0 {
		t.Fatalf("after two posts: %+v %v", r, err)
	}
	if err := st.RecordPosted(ctx, kind, key, "a3", "C1", ""); !errors.Is(err, session.ErrInvalidEvent) {
		t.Fatalf("a post without a ts: %v", err)
	}
	if err := st.RecordPosting(ctx, "", key, "a3", "C1"); !errors.Is(err, session.ErrInvalidEvent) {
		t.Fatalf("a posting without a kind: %v", err)
	}
}

// Failures in a row count from the last ok run and the last resume; many replicas pausing at
// once record one pause; a resume of what is not paused is ErrNotFound; the newest state of
// each is read back.
func TestAutomationFailuresPauseOnce(t *testing.T) {
	t.Parallel()
	st, _, _ := newStorePool(t, 8)
	ctx := context.Background()
	run := func(ok bool) int {
		t.Helper()
		r := session.AutomationRun{Kind: session.AutomationHook, Name: "alerts", Channel: "C1", OK: ok}
		if !ok {
			r.Error = "not_in_channel"
		} else {
			r.Session, r.TS = uuid.New(), "1.1"
		}
		_, n, err := st.RecordRun(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	if run(false) != 1 || run(false) != 2 || run(true) != 0 || run(false) != 1 {
		t.Fatal("failures in a row do not restart after an ok run")
	}
	var paused atomic.Int32
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			_, ok, err := st.PauseAutomation(ctx, session.Pause{Kind: session.AutomationHook, Name: "alerts", Channel: "C1", Reason: "3 failures"})
			if err != nil {
				t.Error(err)
			}
			if ok {
				paused.Add(1)
			}
		})
	}
	wg.Wait()
	if paused.Load() != 1 {
		t.Fatalf("%d pauses recorded, want 1", paused.Load())
	}
	ps, err := st.Pauses(ctx, "")
	if err != nil || ps["hook/alerts"].Action != session.Paused || ps["hook/alerts"].Actor != "system" || ps["hook/alerts"].Channel != "C1" {
		t.Fatalf("pauses: %+v %v", ps, err)
	}
	if _, err := st.ResumeAutomation(ctx, session.Pause{Kind: session.AutomationHook, Name: "alerts", Channel: "C1", Actor: "U1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.ResumeAutomation(ctx, session.Pause{Kind: session.AutomationHook, Name: "alerts", Channel: "C1", Actor: "U1"}); !errors.Is(err, session.ErrNotFound) {
		t.Fatalf("resume twice: %v", err)
	}
	if n := run(false); n != 1 {
		t.Fatalf("failures after the resume: %d, want 1", n)
	}
	runs, err := st.AutomationRuns(ctx, session.RunFilter{Kind: session.AutomationHook, PerName: 3})
	if err != nil || len(runs) != 3 || runs[0].OK || runs[1].OK || !runs[2].OK || runs[2].Session == (session.ID{}) {
		t.Fatalf("the last three runs, newest first: %+v %v", runs, err)
	}
	if _, _, err := st.RecordRun(ctx, session.AutomationRun{Kind: "cron", Name: "x"}); !errors.Is(err, session.ErrInvalidEvent) {
		t.Fatalf("a run of no known kind: %v", err)
	}
}
