package bot_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/slack-go/slack"
	"github.com/slack-go/slack/socketmode"

	"github.com/logbook/logbook/bot"
	"github.com/logbook/logbook/bot/brain"
	"github.com/logbook/logbook/bot/slackemu"
	"github.com/logbook/logbook/migrations/pgtest"
	"github.com/logbook/logbook/session"
)

// Tests from an adversarial review (defects D2–D11), kept as regressions.

func TestGatewayReplySurvivesRateLimitBurst(t *testing.T) {
	t.Parallel()
	h := newHarness(t, &echoAgent{}, harnessOptions{})
	h.emu.InjectMethodFault(slackemu.MethodFault{Method: "chat.postMessage", Status: 429, RetryAfter: 1, Times: 3})
	top := h.post(slackemu.Post{Channel: general, User: ada, Text: "<@" + botUser + "> hello"})
	s := h.session(general, top.TS)
	h.turns(s.ID, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Second)
	defer cancel()
	if _, err := h.emu.WaitForReplies(ctx, general, top.TS, 1); err != nil {
		t.Fatalf("reply never posted after a burst of 3 rate limits: %v; log: %s", err, typesOf(conversation(h.events(s.ID))))
	}
}

// REVIEW-3: the session's first message is redelivered (its first delivery failed: dropped,
// socket down, or a DB blip so it was not acked) and a follow-up in its thread arrives before
// the retry. The follow-up is acked as "no_session" and lost for good.
func TestGatewayThreadReplyBeforeSessionIsNotLost(t *testing.T) {
	t.Parallel()
	h := newHarness(t, &echoAgent{}, harnessOptions{emu: slackemu.Options{
		RetrySchedule: []time.Duration{700 * time.Millisecond, time.Second, 2 * time.Second}}})
	h.waitFor("socket", func() bool { return len(h.emu.Connections()) > 0 })
	h.emu.InjectDeliveryFault(slackemu.DeliveryFault{Kind: slackemu.FaultDrop, Times: 2}) // message + app_mention of the parent
	top := h.post(slackemu.Post{Channel: general, User: ada, Text: "<@" + botUser + "> the deploy failed"})
	follow := h.post(slackemu.Post{Channel: general, User: ada, ThreadTS: top.TS, Text: "here is the log: build 1234"})
	for _, id := range append(top.EventIDs, follow.EventIDs...) {
		if _, err := h.emu.WaitForAck(h.waitCtx(), id); err != nil {
			t.Fatal(err)
		}
	}
	s := h.session(general, top.TS)
	h.turns(s.ID, 1)
	time.Sleep(500 * time.Millisecond)
	if n := len(h.events(s.ID, session.TypeUserMessage)); n != 2 {
		t.Fatalf("%d user_message events, want 2 (the thread reply was acked and dropped as no_session)", n)
	}
}

// REVIEW-4: a message_deleted without previous_message (Slack omits it in some cases) for a
// reply inside a session's thread is resolved to thread = deleted_ts, finds no session, and
// is acked and dropped: the deleted text ("sk-...") stays in transcripts and search.
func TestGatewayDeleteWithoutPreviousMessage(t *testing.T) {
	t.Parallel()
	h := newHarness(t, &echoAgent{}, harnessOptions{})
	top := h.post(slackemu.Post{Channel: general, User: ada, Text: "<@" + botUser + "> hi"})
	h.replies(general, top.TS, 1)
	sec := h.post(slackemu.Post{Channel: general, User: ada, ThreadTS: top.TS, Text: "token is sk-XXXX"})
	h.replies(general, top.TS, 2)
	s := h.session(general, top.TS)
	inner := map[string]any{"type": "message", "subtype": "message_deleted", "hidden": true, "channel": general,
		"channel_type": "channel", "ts": "1800000000.000001", "deleted_ts": sec.TS, "event_ts": "1800000000.000001"}
	id, err := h.emu.PublishEvent(mustJSON(t, inner))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.emu.WaitForAck(h.waitCtx(), id); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	if n := len(h.events(s.ID, session.TypeUserMessageDeleted)); n != 1 {
		t.Fatalf("%d user_message_deleted events, want 1: the deletion of %s was dropped", n, sec.TS)
	}
}

// REVIEW-5: an event that can never be stored (NUL in the user id / ts) is a permanent
// error, yet the gateway answers it like a DB outage: no ack, error log, Slack retries it
// until it gives up. It must be acked (and counted) instead.
func TestGatewayPoisonEnvelopeIsAcked(t *testing.T) {
	t.Parallel()
	h := newHarness(t, &echoAgent{}, harnessOptions{})
	inner := map[string]any{"type": "message", "channel": general, "channel_type": "channel",
		"user": "U000\u00001", "text": "<@" + botUser + "> hi", "ts": "1700000000.000900", "event_ts": "1700000000.000900"}
	id, err := h.emu.PublishEvent(mustJSON(t, inner))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Second)
	defer cancel()
	if _, err := h.emu.WaitForAck(ctx, id); err != nil {
		t.Fatalf("poison envelope never acked (state %s): %v", h.emu.DeliveryState(id), err)
	}
}

func mustJSON(t *testing.T, v any) json.RawMessage {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// REVIEW-6: an ambiguous chat.postMessage failure (the post landed, the client saw an error)
// followed by a failed conversations.replies lookup: Deliverer.post ignores the lookup error
// and posts again, so the reply is shown twice.
func TestGatewayAmbiguousPostWithFailedLookupPostsOnce(t *testing.T) {
	t.Parallel()
	h := newHarness(t, &echoAgent{}, harnessOptions{})
	h.emu.InjectMethodFault(slackemu.MethodFault{Method: "chat.postMessage", Error: "internal_error", ApplyFirst: true, Times: 1})
	h.emu.InjectMethodFault(slackemu.MethodFault{Method: "conversations.replies", Error: "internal_error", Times: 1})
	top := h.post(slackemu.Post{Channel: general, User: ada, Text: "<@" + botUser + "> once please"})
	s := h.session(general, top.TS)
	h.turns(s.ID, 1)
	if n := len(h.emu.BotReplies(general, top.TS)); n != 1 {
		t.Fatalf("%d visible replies, want 1", n)
	}
}

// REVIEW-7 (C10): Slack answers msg_too_long; the part must be re-split and retried once,
// never dropped. Deliverer treats it as permanent: the user sees nothing, ever.
func TestGatewayMsgTooLongIsResplit(t *testing.T) {
	t.Parallel()
	h := newHarness(t, &echoAgent{}, harnessOptions{})
	h.emu.InjectMethodFault(slackemu.MethodFault{Method: "chat.postMessage", Error: "msg_too_long", Times: 1})
	top := h.post(slackemu.Post{Channel: general, User: ada, Text: "<@" + botUser + "> hi"})
	s := h.session(general, top.TS)
	h.turns(s.ID, 1)
	time.Sleep(300 * time.Millisecond)
	if n := len(h.emu.BotReplies(general, top.TS)); n != 1 {
		t.Fatalf("%d visible replies after one msg_too_long, want 1; log: %s", n, typesOf(conversation(h.events(s.ID))))
	}
}

// Malformed frames: each envelope must be acked and nothing may panic.
func TestGatewayMalformedEnvelopesAreAcked(t *testing.T) {
	t.Parallel()
	h := newHarness(t, &echoAgent{}, harnessOptions{})
	h.waitFor("socket", func() bool { return len(h.emu.Connections()) > 0 })
	cb := func(event string) string {
		return `{"type":"event_callback","team_id":"T0000001","api_app_id":"A0000001","event_id":"EvX","event_time":1700000000,"event":` + event + `}`
	}
	frames := map[string]string{
		"m1": `{"envelope_id":"m1","type":"events_api","accepts_response_payload":false,"retry_attempt":0,"retry_reason":"","payload":"junk"}`,
		"m2": `{"envelope_id":"m2","type":"events_api","payload":` + cb(`{"type":"foo_bar","x":1}`) + `}`,
		"m3": `{"envelope_id":"m3","type":"events_api","payload":` + cb(`{"type":"message","subtype":"message_changed","channel":"C0000001","channel_type":"channel","ts":"1.2"}`) + `}`,
		"m4": `{"envelope_id":"m4","type":"events_api","payload":` + cb(`{"type":"message","subtype":"message_deleted","channel":"C0000001","channel_type":"channel","ts":"1.3"}`) + `}`,
		"m5": `{"envelope_id":"m5","type":"events_api","payload":` + cb(`{"type":"message","text":"no channel no user"}`) + `}`,
		"m6": `{"envelope_id":"m6","type":"slash_commands","accepts_response_payload":true,"payload":{"command":7}}`,
		"m7": `{"envelope_id":"m7","type":"events_api","payload":{"type":"event_callback"}}`,
		"m9": `{"envelope_id":"m9","type":"interactive","accepts_response_payload":true,"payload":{"type":"shortcut","callback_id":"x","trigger_id":"1.2","team":{"id":"T0000001"},"user":{"id":"U0000001"}}}`,
		"m8": `{"envelope_id":"m8","type":"events_api","payload":` + cb(`{"type":"app_mention","user":"U0000001","text":"<@UB000001> x","ts":"1700000000.7","channel":"C_NOPE"}`) + `}`,
	}
	for _, f := range frames {
		if err := h.emu.SendRaw(0, []byte(f)); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(2 * time.Second)
	acked := map[string]bool{}
	for _, a := range h.emu.Acks() {
		acked[a.EnvelopeID] = true
	}
	var missing []string
	for id := range frames {
		if !acked[id] {
			missing = append(missing, id)
		}
	}
	if len(missing) > 0 {
		t.Fatalf("envelopes never acked: %v", missing)
	}
}

// The database refuses the append: the gateway must not ack, must keep running, and the
// redelivery must store the message once and answer once.
func TestGatewayDatabaseRefusesAppendThenRecovers(t *testing.T) {
	t.Parallel()
	h := newHarness(t, &echoAgent{}, harnessOptions{emu: slackemu.Options{
		RetrySchedule: []time.Duration{time.Second, time.Second, time.Second}}})
	h.waitFor("socket", func() bool { return len(h.emu.Connections()) > 0 })
	admin, err := pgx.Connect(context.Background(), h.dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(context.Background())
	if _, err := admin.Exec(context.Background(), `REVOKE INSERT ON events FROM logbook_app`); err != nil {
		t.Fatal(err)
	}
	top := h.post(slackemu.Post{Channel: general, User: ada, Text: "<@" + botUser + "> during an outage"})
	time.Sleep(700 * time.Millisecond)
	for _, a := range h.emu.Acks() {
		if !a.Stale {
			t.Fatalf("acked %s while the database refused the append", a.EventID)
		}
	}
	if _, err := admin.Exec(context.Background(), `GRANT INSERT ON events TO logbook_app`); err != nil {
		t.Fatal(err)
	}
	h.replies(general, top.TS, 1)
	s := h.session(general, top.TS)
	h.turns(s.ID, 1)
	if n := len(h.events(s.ID, session.TypeUserMessage)); n != 1 {
		t.Fatalf("%d user messages", n)
	}
	time.Sleep(500 * time.Millisecond)
	if n := len(h.emu.BotReplies(general, top.TS)); n != 1 {
		t.Fatalf("%d replies", n)
	}
}

// REVIEW-8: when lease renewal fails with anything but "fenced" (a statement timeout, a
// dropped connection, a pool that is exhausted), Cell.renew just retries and the cell keeps
// running past its lease's expiry. Another replica takes the session and runs the same turn
// concurrently. Simulated here by making logbook_renew_lease fail.
func TestGatewayExpiredLeaseStopsTheCell(t *testing.T) {
	t.Parallel()
	agent := &activeAgent{echoAgent: echoAgent{block: make(chan struct{})}}
	h := newHarness(t, agent, harnessOptions{replicas: 2, leaseTTL: 1500 * time.Millisecond})
	admin, err := pgx.Connect(context.Background(), h.dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(context.Background())
	if _, err := admin.Exec(context.Background(), `CREATE OR REPLACE FUNCTION logbook_renew_lease(p_session uuid, p_owner text, p_epoch bigint, p_ttl interval)
RETURNS TABLE (expires_at timestamptz) LANGUAGE plpgsql AS $$
BEGIN RAISE EXCEPTION 'canceling statement due to statement timeout' USING ERRCODE = '57014'; END $$`); err != nil {
		t.Fatal(err)
	}
	h.post(slackemu.Post{Channel: general, User: ada, Text: "<@" + botUser + "> long job"})
	h.waitFor("the agent to start", func() bool { return agent.Runs() == 1 })
	time.Sleep(4 * time.Second) // > 2 lease TTLs
	if n := agent.maxActive(); n != 1 {
		t.Fatalf("the turn's agent ran %d times at once (%d runs): the first cell kept running after its lease expired", n, agent.Runs())
	}
}

// activeAgent counts how many runs are in progress at once.
type activeAgent struct {
	echoAgent
	amu          sync.Mutex
	active, peak int
}

func (a *activeAgent) Run(ctx context.Context, t brain.Turn) (brain.Reply, error) {
	a.amu.Lock()
	a.active++
	a.peak = max(a.peak, a.active)
	a.amu.Unlock()
	defer func() { a.amu.Lock(); a.active--; a.amu.Unlock() }()
	return a.echoAgent.Run(ctx, t)
}

func (a *activeAgent) maxActive() int {
	a.amu.Lock()
	defer a.amu.Unlock()
	return a.peak
}

// REVIEW-9: the Web API client has no timeout (slack.New's default http.Client{}) and the
// gateway calls users.info (and conversations.info) on the ack path with the gateway's
// lifetime context. One hung users.info call and the envelope is never acked; every retry
// hangs the same way and the message is lost. "A name is a nicety, never a reason to lose a
// message" (directory.UserName).
func TestGatewayHungUsersInfoDoesNotBlockAck(t *testing.T) {
	t.Parallel()
	emu := slackemu.MustStart(t, slackemu.Options{PingInterval: 100 * time.Millisecond,
		RetrySchedule: []time.Duration{50 * time.Millisecond, 200 * time.Millisecond, 500 * time.Millisecond}})
	target, _ := url.Parse(emu.URL())
	rp := httputil.NewSingleHostReverseProxy(target)
	hang := make(chan struct{})
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/users.info") {
			select {
			case <-hang:
			case <-r.Context().Done():
			}
			return
		}
		rp.ServeHTTP(w, r)
	}))
	defer proxy.Close()
	defer close(hang)
	dbURL := pgtest.New(t)
	pool, err := session.Connect(context.Background(), dbURL, session.PoolOptions{Role: "logbook_app"})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	store := session.NewStore(pool, session.Options{})
	api := slack.New(emu.BotToken(), slack.OptionAPIURL(proxy.URL+"/api/"), slack.OptionAppLevelToken(emu.AppToken()))
	sm := socketmode.New(api, socketmode.OptionPingInterval(2*time.Second))
	me, err := bot.WhoAmI(context.Background(), api)
	if err != nil {
		t.Fatal(err)
	}
	metrics := bot.NewMetrics(prometheus.NewRegistry())
	log := zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)
	runner := bot.NewRunner(bot.RunnerDeps{Log: log, Store: store, DatabaseURL: dbURL, Agent: &echoAgent{},
		Deliver: bot.NewDeliverer(api, log, metrics, bot.DeliveryConfig{}), Metrics: metrics},
		bot.RunnerConfig{PollInterval: 200 * time.Millisecond, LeaseTTL: 3 * time.Second})
	gw := bot.NewGateway(log, store, api, sm, me, runner.Signal, metrics, nil, bot.GatewayConfig{})
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { gw.Run(ctx) })
	wg.Go(func() { runner.Run(ctx) })
	defer wg.Wait()
	defer cancel()

	top, err := emu.Post(slackemu.Post{Channel: general, User: ada, Text: "<@" + botUser + "> are you there?"})
	if err != nil {
		t.Fatal(err)
	}
	wctx, wcancel := context.WithTimeout(context.Background(), 6*time.Second)
	defer wcancel()
	for _, id := range top.EventIDs {
		if _, err := emu.WaitForAck(wctx, id); err != nil {
			t.Fatalf("event %s never acked while users.info hangs (state %s): %v", id, emu.DeliveryState(id), err)
		}
	}
}
