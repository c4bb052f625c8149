package replay_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/logbook/logbook/audit"
	"github.com/logbook/logbook/bot/brain"
	"github.com/logbook/logbook/bot/replay"
	"github.com/logbook/logbook/migrations/pgtest"
	"github.com/logbook/logbook/session"
)

// scripted is a model that, for each user message, calls the lookup tool once and then
// answers with what it returned.
type scripted struct{}

func (scripted) Name() string  { return "scripted" }
func (scripted) Model() string { return "scripted-1" }
func (scripted) Complete(_ context.Context, req brain.Request) (brain.Response, error) {
	last := req.Messages[len(req.Messages)-1]
	for _, b := range last.Blocks {
		if b.ToolResult != nil {
			return brain.Response{Text: "It says " + b.ToolResult.Content, StopReason: "end_turn", InputTokens: 100, OutputTokens: 10}, nil
		}
	}
	n := len(req.Messages)
	return brain.Response{StopReason: "tool_use", InputTokens: 90, OutputTokens: 5,
		ToolUses: []brain.ToolUse{{ID: fmt.Sprintf("call_%d", n), Name: "lookup", Input: json.RawMessage(fmt.Sprintf(`{"n":%d}`, n))}}}, nil
}

type storeLog struct {
	store *session.Store
	id    session.ID
}

func (l storeLog) Events(ctx context.Context, r session.Range) ([]session.Event, error) {
	return l.store.Events(ctx, l.id, r)
}

func (l storeLog) Append(ctx context.Context, evs ...session.NewEvent) ([]session.Event, error) {
	return l.store.Append(ctx, l.id, evs...)
}

var (
	bot    = session.Actor{Kind: session.ActorBot, ID: "UB000001"}
	cell   = session.Actor{Kind: session.ActorSystem, ID: "cell"}
	lookup = brain.NewTool(brain.ToolSpec{Name: "lookup", Description: "looks a number up", Schema: brain.ObjectSchema(nil)},
		func(_ context.Context, use brain.ToolUse) brain.Outcome {
			return brain.Outcome{Content: "value of " + string(use.Input)}
		})
)

// record runs turns turns of the real brain against a real log, as a cell would (user
// message, turn_started, the agent, turn_completed), and returns the store and the session.
func record(tb testing.TB, turns int) (*session.Store, session.Session) {
	tb.Helper()
	store, sess, _ := recordDB(tb, turns)
	return store, sess
}

// recordDB is record, with the database's URL (its owner's).
func recordDB(tb testing.TB, turns int) (*session.Store, session.Session, string) {
	tb.Helper()
	ctx := context.Background()
	dbURL := pgtest.New(tb)
	pool, err := session.Connect(ctx, dbURL, session.PoolOptions{Role: "logbook_app"})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(pool.Close)
	store := session.NewStore(pool, session.Options{})
	sess, err := store.Open(ctx, session.ThreadKey{Team: "T0000001", Channel: "C0000001", ThreadTS: "1700000000.000100"})
	if err != nil {
		tb.Fatal(err)
	}
	b, err := brain.New(brain.Config{Provider: scripted{}, DeferTitle: true})
	if err != nil {
		tb.Fatal(err)
	}
	log := storeLog{store, sess.ID}
	for i := range turns {
		ts := fmt.Sprintf("1700000000.%06d", 100+i)
		msg, err := store.Append(ctx, sess.ID, session.NewEvent{Type: session.TypeUserMessage, Actor: session.Actor{Kind: session.ActorUser, ID: "U0000001"},
			Payload: session.UserMessage{Team: "T0000001", Channel: "C0000001", ThreadTS: sess.Key.ThreadTS, TS: ts, User: "U0000001",
				Text: fmt.Sprintf("<@UB000001> look up number %d", i)}})
		if err != nil {
			tb.Fatal(err)
		}
		through := msg[0].Seq
		started, err := store.Append(ctx, sess.ID, session.NewEvent{Type: session.TypeTurnStarted, Actor: cell, Payload: session.TurnStarted{Through: through}})
		if err != nil {
			tb.Fatal(err)
		}
		turn := brain.Turn{Session: sess, Log: log, Where: brain.Where{BotUserID: bot.ID, Channel: "C0000001", ThreadTS: sess.Key.ThreadTS},
			Tools: []brain.Tool{lookup}, TurnSeq: started[0].Seq, Through: through}
		r, err := b.Run(ctx, turn)
		if err != nil {
			tb.Fatal(err)
		}
		if _, err := store.Append(ctx, sess.ID, session.NewEvent{Type: session.TypeTurnCompleted, Actor: cell,
			Payload: session.TurnCompleted{Turn: started[0].Seq, Status: r.Status, Through: through}}); err != nil {
			tb.Fatal(err)
		}
	}
	return store, sess, dbURL
}

func events(tb testing.TB, store *session.Store, id session.ID) []session.Event {
	tb.Helper()
	evs, err := store.Events(context.Background(), id, session.Range{})
	if err != nil {
		tb.Fatal(err)
	}
	return evs
}

func TestReplayOfARecordedSessionIsIdentical(t *testing.T) {
	t.Parallel()
	store, sess := record(t, 3)
	evs := events(t, store, sess.ID)
	res, err := replay.Session(context.Background(), sess, evs, replay.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Identical() || res.Turns != 3 || res.Requests != 6 || res.ToolCalls != 3 || res.Through != evs[len(evs)-1].Seq {
		t.Fatalf("replay: %+v\n%s", res, res)
	}
}

// A session recorded before request hashes were kept is compared by its answers, and the
// verdict says so.
func TestReplayOfASessionWithoutRequestHashes(t *testing.T) {
	t.Parallel()
	store, sess := record(t, 2)
	evs := events(t, store, sess.ID)
	stripped := 0
	for i, e := range evs {
		var m map[string]any
		if e.Type != session.TypeAssistantMessage || json.Unmarshal(e.Payload, &m) != nil {
			continue
		}
		if u, ok := m["usage"].(map[string]any); ok {
			delete(u, "request_hash")
			evs[i].Payload, _ = json.Marshal(m)
			stripped++
		}
	}
	res, err := replay.Session(context.Background(), sess, evs, replay.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if stripped != 4 || !res.Identical() || res.Requests != 0 || res.Unhashed != 4 ||
		!strings.Contains(res.String(), "4 model requests were recorded before logbook kept their hash") {
		t.Fatalf("replay of %d unhashed requests: %+v\n%s", stripped, res, res)
	}
}

// A tool result edited after the fact changes the next request the code builds: with the
// request hashes kept, that request is the divergence. (Without them the edit goes unseen:
// the model's recorded answer is served whatever it was asked.)
func TestReplayFindsAnEditedToolResultByTheNextRequest(t *testing.T) {
	t.Parallel()
	store, sess := record(t, 2)
	evs := events(t, store, sess.ID)
	edited := int64(0)
	for i, e := range evs {
		if e.Type == session.TypeToolResult {
			evs[i].Payload = json.RawMessage(strings.Replace(string(e.Payload), "value of", "VALUE OF", 1))
			edited = e.Seq
			break
		}
	}
	res, err := replay.Session(context.Background(), sess, evs, replay.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if d := res.Divergence; d == nil || d.What != "model request" || d.Seq != edited+1 || !strings.Contains(d.Replayed, "ending with the result of call_") {
		t.Fatalf("replay of an edited tool result (seq %d): %+v\n%s", edited, res, res)
	}
}

// BenchmarkReplay measures replaying a session of about 1,000 events (143 turns of 7 events:
// user message, turn_started, a tool call and its result, the reply, turn_completed) beside
// the raw read of the same events: ns/1k-events of each.
func BenchmarkReplay(b *testing.B) {
	store, sess := record(b, 143)
	ctx := context.Background()
	n := len(events(b, store, sess.ID))
	b.Run("read", func(b *testing.B) {
		for b.Loop() {
			if _, err := store.Events(ctx, sess.ID, session.Range{}); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)*1000/float64(n), "ns/1k-events")
	})
	b.Run("replay", func(b *testing.B) {
		for b.Loop() {
			evs, err := store.Events(ctx, sess.ID, session.Range{})
			if err != nil {
				b.Fatal(err)
			}
			res, err := replay.Session(ctx, sess, evs, replay.Config{})
			if err != nil || !res.Identical() {
				b.Fatalf("replay: %v %s", err, res)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)*1000/float64(n), "ns/1k-events")
	})
}

// The audit package's golden export replays: every whole session in it says identical.
func TestReplayOfTheGoldenExport(t *testing.T) {
	t.Parallel()
	sessions, err := audit.ReadExportedSessions("../../audit/testdata")
	if err != nil {
		t.Fatal(err)
	}
	replayed := 0
	for _, s := range sessions {
		if !s.Whole {
			continue
		}
		res, err := replay.Session(context.Background(), s.Session, s.Events, replay.Config{})
		if err != nil || !res.Identical() || res.Through != s.Events[len(s.Events)-1].Seq {
			t.Fatalf("replay of golden session %s: %v\n%s", s.Session.ID, err, res)
		}
		replayed++
	}
	if len(sessions) != 2 || replayed == 0 {
		t.Fatalf("%d sessions in the golden export, %d replayed", len(sessions), replayed)
	}
}
