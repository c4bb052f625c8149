package session_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/logbook/logbook/session"
)

// A tick is claimed by one of many concurrent claimers, ticks are claimed in order, a removed
// schedule's ticks are not claimed, an expired attempt is retried by one replica only, and the
// records refuse changes.
func TestScheduleTicksAreClaimedOnce(t *testing.T) {
	t.Parallel()
	st, pool, _ := newStorePool(t, 8)
	ctx := context.Background()
	sc, err := st.AddSchedule(ctx, session.Schedule{Team: "T1", Channel: "C0001", Spec: "@every 2s", Prompt: "p", AddedBy: "U1"})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().Truncate(time.Second)
	tick := session.Tick{Schedule: sc, At: now}
	var won atomic.Int32
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			_, ok, err := st.ClaimTick(ctx, tick, "owner-"+string(rune('a'+i)), now.Add(time.Second))
			if err != nil {
				t.Error(err)
			}
			if ok {
				won.Add(1)
			}
		})
	}
	wg.Wait()
	if won.Load() != 1 {
		t.Fatalf("%d claimers won the tick", won.Load())
	}
	if _, ok, _ := st.ClaimTick(ctx, session.Tick{Schedule: sc, At: now.Add(-2 * time.Second)}, "x", now); ok {
		t.Fatal("an older tick was claimed after a newer one")
	}
	// Not yet expired: nobody retries it; expired: one replica of many does.
	if got, err := st.RetryTicks(ctx, "b", now, now.Add(-time.Minute), now.Add(time.Minute)); err != nil || len(got) != 0 {
		t.Fatalf("retried before expiry: %+v %v", got, err)
	}
	var retried atomic.Int32
	for range 4 {
		wg.Go(func() {
			got, err := st.RetryTicks(ctx, "b", now.Add(2*time.Second), now.Add(-time.Minute), now.Add(time.Minute))
			if err != nil {
				t.Error(err)
			}
			for _, r := range got {
				if r.Attempt != 2 || !r.At.Equal(now) || r.Schedule.Prompt != "p" {
					t.Errorf("retried %+v", r)
				}
				retried.Add(1)
			}
		})
	}
	wg.Wait()
	if retried.Load() != 1 {
		t.Fatalf("retried %d times", retried.Load())
	}
	sid := session.ID{1}
	if err := st.TickRan(ctx, tick, "1700000000.000100", sid, true); err != nil {
		t.Fatal(err)
	}
	if got, _ := st.RetryTicks(ctx, "c", now.Add(time.Hour), now.Add(-time.Hour), now.Add(2*time.Hour)); len(got) != 0 {
		t.Fatalf("a tick that ran was retried: %+v", got)
	}
	runs, err := st.TickRuns(ctx, sc.ID)
	if err != nil || len(runs) != 1 || runs[0].TS != "1700000000.000100" || !runs[0].Found || runs[0].Attempt != 2 {
		t.Fatalf("runs %+v %v", runs, err)
	}
	// A tick that never gets posted has MaxTickAttempts attempts, then is left.
	next := session.Tick{Schedule: sc, At: now.Add(2 * time.Second)}
	if _, ok, err := st.ClaimTick(ctx, next, "a", now); !ok || err != nil {
		t.Fatal(ok, err)
	}
	attempts := 1
	for i := range 10 {
		at := now.Add(time.Duration(i+1) * time.Minute)
		got, err := st.RetryTicks(ctx, "a", at, now.Add(-time.Hour), at.Add(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		attempts += len(got)
	}
	if attempts != session.MaxTickAttempts {
		t.Fatalf("%d attempts, want %d", attempts, session.MaxTickAttempts)
	}
	if _, err := st.RemoveSchedule(ctx, "T1", sc.ID, "U2"); err != nil {
		t.Fatal(err)
	}
	if _, err := st.RemoveSchedule(ctx, "T1", sc.ID, "U2"); !errors.Is(err, session.ErrNotFound) {
		t.Fatalf("removed twice: %v", err)
	}
	if _, ok, _ := st.ClaimTick(ctx, session.Tick{Schedule: sc, At: now.Add(10 * time.Second)}, "a", now); ok {
		t.Fatal("a removed schedule's tick was claimed")
	}
	all, err := st.Schedules(ctx, "T1", "", true)
	if err != nil || len(all) != 1 || !all[0].Removed || all[0].RemovedBy != "U2" || !all[0].LastTick.Equal(next.At) {
		t.Fatalf("schedules %+v %v", all, err)
	}
	if live, _ := st.Schedules(ctx, "T1", "", false); len(live) != 0 {
		t.Fatalf("live schedules %+v", live)
	}
	for _, q := range []string{"UPDATE schedules SET prompt = 'x'", "DELETE FROM schedule_ticks", "UPDATE schedule_tick_runs SET ts = 'x'"} {
		if _, err := pool.Exec(ctx, q); err == nil {
			t.Errorf("%s: allowed", q)
		}
	}
}

// A hook's delivery is accepted once: the same delivery id, or the same body signed at the
// same time, again within the window is a replay; the same body signed at another time (a
// real alert that repeats), one outside the window, or one after a recorded failure is
// accepted again.
func TestHookDeliveriesReplays(t *testing.T) {
	t.Parallel()
	st, _ := newStore(t)
	ctx := context.Background()
	signed := time.Now().Truncate(time.Second)
	accept := func(id, body string, at time.Time, window time.Duration) (session.HookDelivery, bool) {
		t.Helper()
		d, ok, err := st.AcceptHook(ctx, session.HookDelivery{Hook: "alerts", DeliveryID: id, BodySHA256: body, SignedAt: at, Channel: "C0001"}, window, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		return d, ok
	}
	first, ok := accept("d1", "h1", signed, time.Hour)
	if !ok || first.Outcome != session.HookAccepted {
		t.Fatalf("first: %+v", first)
	}
	if d, ok := accept("d1", "h2", signed, time.Hour); ok || d.Outcome != session.HookReplay {
		t.Fatalf("same id: %+v", d)
	}
	if d, ok := accept("", "h1", signed, time.Hour); ok || d.Outcome != session.HookReplay {
		t.Fatalf("same body, same timestamp: %+v", d)
	}
	if d, ok := accept("", "h1", signed.Add(time.Minute), time.Hour); !ok || d.Outcome != session.HookAccepted {
		t.Fatalf("same body signed later (a real repeat): %+v", d)
	}
	if _, ok := accept("d1", "h1", signed, -time.Hour); !ok {
		t.Fatal("outside the window: a replay")
	}
	second, ok := accept("d3", "h3", signed, time.Hour)
	if !ok {
		t.Fatal("d3")
	}
	if _, err := st.RecordHook(ctx, session.HookDelivery{Hook: "alerts", DeliveryID: "d3", Outcome: session.HookFailed, Of: second.ID}); err != nil {
		t.Fatal(err)
	}
	if _, ok := accept("d3", "h3", signed, time.Hour); !ok {
		t.Fatal("the retry of a failed delivery was a replay")
	}
	if err := st.HookRan(ctx, first.ID, "1.2", session.ID{2}); err != nil {
		t.Fatal(err)
	}
	ds, err := st.HookDeliveries(ctx, "alerts")
	if err != nil || len(ds) != 8 || ds[0].TS != "1.2" {
		t.Fatalf("deliveries %d %+v %v", len(ds), ds, err)
	}
}

// Now is the database's clock; StopSchedule records a stop by the system with its reason; a
// tick recorded failed is never retried.
func TestScheduleStopAndFailedTick(t *testing.T) {
	t.Parallel()
	st, _ := newStore(t)
	ctx := context.Background()
	now, err := st.Now(ctx)
	if err != nil || now.Sub(time.Now()).Abs() > time.Minute {
		t.Fatalf("now %v %v", now, err)
	}
	sc, err := st.AddSchedule(ctx, session.Schedule{Team: "T1", Channel: "C0001", Spec: "@every 2s", Prompt: "p", AddedBy: "U1"})
	if err != nil {
		t.Fatal(err)
	}
	tick := session.Tick{Schedule: sc, At: now.Truncate(time.Second)}
	claimed, ok, err := st.ClaimTick(ctx, tick, "a", now.Add(time.Second))
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	if err := st.TickFailed(ctx, claimed, "post: not_in_channel"); err != nil {
		t.Fatal(err)
	}
	if got, err := st.RetryTicks(ctx, "b", now.Add(time.Hour), now.Add(-time.Hour), now.Add(2*time.Hour)); err != nil || len(got) != 0 {
		t.Fatalf("a failed tick was retried: %+v %v", got, err)
	}
	if runs, err := st.TickRuns(ctx, sc.ID); err != nil || len(runs) != 1 || runs[0].Failed != "post: not_in_channel" {
		t.Fatalf("runs %+v %v", runs, err)
	}
	if err := st.StopSchedule(ctx, "T1", sc.ID, "U1 left"); err != nil {
		t.Fatal(err)
	}
	if err := st.StopSchedule(ctx, "T1", sc.ID, "again"); !errors.Is(err, session.ErrNotFound) {
		t.Fatalf("stop twice: %v", err)
	}
	all, err := st.Schedules(ctx, "T1", "", true)
	if err != nil || len(all) != 1 || all[0].RemovedBy != "system" || all[0].RemovedWhy != "U1 left" {
		t.Fatalf("schedules %+v %v", all, err)
	}
}
