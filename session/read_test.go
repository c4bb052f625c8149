package session_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/logbook/logbook/session"
)

func seqsOf(evs []session.Event) []int64 {
	out := make([]int64, len(evs))
	for i, e := range evs {
		out[i] = e.Seq
	}
	return out
}

// Select answers every Range in memory exactly as the store's Events answers it in SQL.
func TestSelectAnswersAsEvents(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store, _ := newStore(t)
	sess := openSession(t, store, "1.1")
	user := session.Actor{Kind: session.ActorUser, ID: "U1"}
	types := []session.Type{session.TypeUserMessage, session.TypeTurnStarted, session.TypeAssistantMessage, session.TypeDelivered, session.TypeTurnCompleted}
	for i := range 23 {
		var p any = map[string]any{"n": i}
		if types[i%len(types)] == session.TypeUserMessage {
			p = session.UserMessage{TS: fmt.Sprintf("1.%d", i), Text: "hi"}
		}
		if _, err := store.Append(ctx, sess.ID, session.NewEvent{Type: types[i%len(types)], Actor: user, Payload: p}); err != nil {
			t.Fatal(err)
		}
	}
	all, err := store.Events(ctx, sess.ID, session.Range{})
	if err != nil || len(all) != 23 {
		t.Fatalf("%d events, %v; want 23", len(all), err)
	}
	var ranges []session.Range
	for _, from := range []int64{0, 1, 5, 23, 30} {
		for _, to := range []int64{0, 4, 22} {
			for _, lim := range []int{0, 1, 3} {
				for _, desc := range []bool{false, true} {
					for _, ty := range [][]session.Type{nil, {session.TypeDelivered}, {session.TypeUserMessage, session.TypeTurnCompleted}} {
						ranges = append(ranges, session.Range{From: from, To: to, Limit: lim, Desc: desc, Types: ty})
					}
				}
			}
		}
	}
	for _, before := range []int64{1, 2, 10, 24, 40} {
		for _, lim := range []int{1, 4} {
			ranges = append(ranges, session.Range{Before: before, Limit: lim}, session.Range{Before: before, Limit: lim, Desc: true},
				session.Range{Before: before, Limit: lim, Types: []session.Type{session.TypeUserMessage}})
		}
	}
	for _, r := range ranges {
		want, err := store.Events(ctx, sess.ID, r)
		if err != nil {
			t.Fatal(err)
		}
		if got := session.Select(all, r); fmt.Sprint(seqsOf(got)) != fmt.Sprint(seqsOf(want)) {
			t.Errorf("%+v: Select %v, Events %v", r, seqsOf(got), seqsOf(want))
		}
	}
}
