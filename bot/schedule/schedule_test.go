package schedule_test

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/slack-go/slack"
	"go.uber.org/goleak"

	"github.com/logbook/logbook/bot"
	"github.com/logbook/logbook/bot/schedule"
	"github.com/logbook/logbook/bot/slackemu"
	"github.com/logbook/logbook/bot/slashcmd"
	"github.com/logbook/logbook/migrations/pgtest"
	"github.com/logbook/logbook/session"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const (
	general = "C0000001"
	admin   = "U0000001"
	other   = "U0000002"
)

// clock is a test clock moved on by hand; the scheduler's passes are called directly.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) After(time.Duration) <-chan time.Time { return nil }

func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

type env struct {
	t       *testing.T
	emu     *slackemu.Server
	store   *session.Store
	clock   *clock
	signals chan session.ID
}

func newEnv(t *testing.T) *env { return newEnvWith(t, slackemu.Options{}) }

// nonMarketplace is Slack as an app outside the Slack Marketplace sees it since 2025: its
// history read one request a minute, 15 messages a page.
func nonMarketplace() slackemu.Options {
	return slackemu.Options{RateLimits: slackemu.NonMarketplaceLimits(), HistoryMaxLimit: 15, RepliesMaxLimit: 15}
}

func newEnvWith(t *testing.T, opts slackemu.Options) *env {
	t.Helper()
	emu := slackemu.MustStart(t, opts)
	pool, err := session.Connect(context.Background(), pgtest.New(t), session.PoolOptions{Role: "logbook_app"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return &env{t: t, emu: emu, store: session.NewStore(pool, session.Options{}), clock: &clock{now: time.Now()},
		signals: make(chan session.ID, 1000)}
}

// dbClock is the shared store with the database's clock replaced by the test's (e.clock):
// time in these tests is the database's, moved on by hand.
type dbClock struct {
	*session.Store
	c *clock
}

func (d dbClock) Now(context.Context) (time.Time, error) { return d.c.Now(), nil }

// skewed is a replica's own clock, off the database's by a fixed amount.
type skewed struct {
	c   *clock
	off time.Duration
}

func (s skewed) Now() time.Time                       { return s.c.Now().Add(s.off) }
func (s skewed) After(time.Duration) <-chan time.Time { return nil }

// replica is one replica's scheduler: its own Slack client, owner name and clock (cfg.Clock,
// default the database's), the shared store.
func (e *env) replica(owner string, cfg schedule.Config) *schedule.Scheduler {
	return e.replicaOn(owner, cfg, e.store)
}

// startStore is what a bot.Starter takes: the shared store, or one whose replica dies.
type startStore interface {
	Open(ctx context.Context, key session.ThreadKey) (session.Session, error)
	Append(ctx context.Context, id session.ID, evs ...session.NewEvent) ([]session.Event, error)
	OpeningPosts(ctx context.Context, kind, key string) (session.OpeningRecord, error)
	RecordPosting(ctx context.Context, kind, key, marker, channel string) error
	RecordPosted(ctx context.Context, kind, key, marker, channel, ts string) error
}

// diesAfterPost is the shared store as a replica sees it that dies just after its post is
// recorded: its first Open never happens (the replica is gone before it opens the session).
type diesAfterPost struct {
	*session.Store
	died atomic.Bool
}

func (d *diesAfterPost) Open(ctx context.Context, key session.ThreadKey) (session.Session, error) {
	if d.died.CompareAndSwap(false, true) {
		return session.Session{}, errors.New("the replica died after its post")
	}
	return d.Store.Open(ctx, key)
}

// replicaOn is a replica whose Starter records in store.
func (e *env) replicaOn(owner string, cfg schedule.Config, store startStore) *schedule.Scheduler {
	api := slack.New(e.emu.BotToken(), slack.OptionAPIURL(e.emu.APIURL()))
	starter := bot.NewStarter(api, store, func(id session.ID) { e.signals <- id }, e.emu.TeamID())
	cfg.Owner, cfg.Team = owner, e.emu.TeamID()
	if cfg.Clock == nil {
		cfg.Clock = e.clock
	}
	if cfg.Admins == nil {
		cfg.Admins = []string{admin}
	}
	cfg.Log = zerolog.New(zerolog.NewTestWriter(e.t))
	cfg.Slack = api
	cfg.Poster = api
	cfg.Grace = cmpOr(cfg.Grace, 5*time.Second)
	cfg.ClaimTTL = cmpOr(cfg.ClaimTTL, 3*time.Second)
	return schedule.New(dbClock{e.store, e.clock}, starter, cfg)
}

func cmpOr(a, b time.Duration) time.Duration {
	if a != 0 {
		return a
	}
	return b
}

// add adds a schedule through the slash command, as an admin, and starts the clock at the
// moment it was added.
func (e *env) add(s *schedule.Scheduler, spec, prompt string) session.Schedule {
	e.t.Helper()
	answer := e.slash(s, admin, `schedule add "`+spec+`" `+prompt)
	if !strings.Contains(answer, "added") {
		e.t.Fatalf("add: %s", answer)
	}
	scheds, err := e.store.Schedules(context.Background(), "", "", false)
	if err != nil || len(scheds) == 0 {
		e.t.Fatalf("schedules: %v %v", scheds, err)
	}
	sc := scheds[len(scheds)-1]
	e.clock.mu.Lock()
	e.clock.now = sc.AddedAt
	e.clock.mu.Unlock()
	return sc
}

func (e *env) slash(s *schedule.Scheduler, user, text string) string {
	return e.slashIn(s, general, user, text)
}

func (e *env) slashIn(s *schedule.Scheduler, channel, user, text string) string {
	t := slashcmd.New(e.emu.TeamID(), slashcmd.Help{Intro: []string{"logbook"}}).Add(schedule.Command(s))
	return t.Answer(context.Background(), slack.SlashCommand{TeamID: e.emu.TeamID(), ChannelID: channel, UserID: user, Text: text})
}

// tickPosts are the bot's top-level posts of ticks in general, by tick id.
func (e *env) tickPosts() map[string][]slackemu.Message {
	out := map[string][]slackemu.Message{}
	for _, m := range e.emu.History(general) {
		if m.ThreadTS != "" || len(m.Metadata) == 0 {
			continue
		}
		var md struct {
			EventType    string         `json:"event_type"`
			EventPayload map[string]any `json:"event_payload"`
		}
		if json.Unmarshal(m.Metadata, &md) != nil || md.EventType != schedule.MetadataEventType {
			continue
		}
		id, _ := md.EventPayload["id"].(string)
		out[id] = append(out[id], m)
	}
	return out
}

func (e *env) runs(id int64) []session.TickRun {
	e.t.Helper()
	runs, err := e.store.TickRuns(context.Background(), id)
	if err != nil {
		e.t.Fatal(err)
	}
	return runs
}

// pass runs one pass of every scheduler at once, as replicas do.
func pass(t *testing.T, ss ...*schedule.Scheduler) {
	t.Helper()
	var wg sync.WaitGroup
	for _, s := range ss {
		wg.Go(func() {
			if err := s.Pass(context.Background()); err != nil {
				t.Errorf("pass: %v", err)
			}
		})
	}
	wg.Wait()
}

// A schedule every two seconds over two replicas, both passing at the same moments: every tick
// is posted exactly once, in order, each post starts a session whose first message is the
// prompt, written by the system (schedule/<id>) with the admin who set it in the payload, and
// each is signalled.
func TestTwoReplicasPostEachTickOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a, b := e.replica("replica-a", schedule.Config{}), e.replica("replica-b", schedule.Config{})
	sc := e.add(a, "@every 2s", "check the queue depth")
	for range 24 { // 12 s of ticks
		e.clock.add(500 * time.Millisecond)
		pass(t, a, b)
	}
	posts := e.tickPosts()
	runs := e.runs(sc.ID)
	if len(runs) != 6 || len(posts) != 6 {
		t.Fatalf("%d runs and %d ticks posted over 12s of @every 2s, want 6 each: %+v", len(runs), len(posts), runs)
	}
	for i, r := range runs {
		want := sc.AddedAt.Add(time.Duration(i+1) * 2 * time.Second).Truncate(time.Second)
		if !r.At.Equal(want) || r.Late || r.TS == "" || r.Attempt != 1 {
			t.Fatalf("run %d: %+v, want tick %v on time", i, r, want)
		}
		p := posts[r.ID()]
		if len(p) != 1 || p[0].TS != r.TS {
			t.Fatalf("tick %s posted %d times: %+v", r.ID(), len(p), p)
		}
		if !strings.Contains(p[0].Text, "Schedule "+itoa(sc.ID)) || !strings.Contains(p[0].Text, "set by "+admin) ||
			!strings.Contains(p[0].Text, "check the queue depth") || strings.Contains(p[0].Text, "late") {
			t.Fatalf("post: %q", p[0].Text)
		}
		evs, err := e.store.Events(context.Background(), r.Session, session.Range{})
		if err != nil || len(evs) != 1 || evs[0].Type != session.TypeUserMessage ||
			evs[0].Actor != (session.Actor{Kind: session.ActorSystem, ID: "schedule/" + itoa(sc.ID)}) {
			t.Fatalf("session of tick %s: %+v %v", r.ID(), evs, err)
		}
		var um session.UserMessage
		if evs[0].Decode(&um) != nil || !strings.HasSuffix(um.Text, "check the queue depth") || um.ThreadTS != r.TS || um.SetBy != admin || um.User != "" {
			t.Fatalf("first message: %+v", um)
		}
	}
	if n := len(e.signals); n != 6 {
		t.Fatalf("%d signals, want 6", n)
	}
}

// A replica whose post reached Slack but who never learnt it (Slack answers an error after
// posting, as when the replica dies between Slack's answer and its record): once its attempt
// expires, the other replica takes the tick over. The log says the attempt was about to post
// and has no ts, so it looks once — one request, one page of 15, as Slack allows apps outside
// the Marketplace — around that attempt, finds the post by its metadata and starts the session
// on it: the tick is posted once.
func TestCrashAfterThePostIsFoundNotPostedAgain(t *testing.T) {
	t.Parallel()
	e := newEnvWith(t, nonMarketplace())
	a, b := e.replica("replica-a", schedule.Config{}), e.replica("replica-b", schedule.Config{})
	sc := e.add(a, "@every 1m", "daily digest")
	e.emu.InjectMethodFault(slackemu.MethodFault{Method: "chat.postMessage", Error: "internal_error", ApplyFirst: true, Times: 1})
	e.clock.add(time.Minute)
	if err := a.Pass(context.Background()); err == nil {
		t.Fatal("the pass whose post failed reported no error")
	}
	if runs := e.runs(sc.ID); len(runs) != 1 || runs[0].TS != "" {
		t.Fatalf("after the failed attempt: %+v", runs)
	}
	// Before the attempt expires nobody takes it over.
	e.clock.add(time.Second)
	pass(t, b)
	if runs := e.runs(sc.ID); runs[0].TS != "" {
		t.Fatalf("taken over before the attempt expired: %+v", runs)
	}
	e.clock.add(3 * time.Second)
	pass(t, a, b)
	runs := e.runs(sc.ID)
	posts := e.tickPosts()
	if len(runs) != 1 || runs[0].TS == "" || !runs[0].Found || runs[0].Attempt != 2 || len(posts[runs[0].ID()]) != 1 || len(posts) != 1 {
		t.Fatalf("runs %+v, posts %+v", runs, posts)
	}
	reqs := e.emu.Requests("conversations.history")
	if len(reqs) != 1 || reqs[0].Params.Get("limit") != "15" || reqs[0].Params.Get("latest") == "" {
		t.Fatalf("history requests %+v: want one narrow page of 15", reqs)
	}
}

// A replica that died after its post was recorded and before the session started: the next
// attempt reads the post's ts from the log and starts the session on it, asking Slack's
// history nothing — here every conversations.history request is refused as rate-limited, as
// it is for an app outside the Marketplace that has used its one request a minute.
func TestRetryFindsItsPostInTheLog(t *testing.T) {
	t.Parallel()
	e := newEnvWith(t, nonMarketplace())
	e.emu.InjectMethodFault(slackemu.MethodFault{Method: "conversations.history", Status: 429, RetryAfter: 60})
	a := e.replicaOn("replica-a", schedule.Config{}, &diesAfterPost{Store: e.store})
	b := e.replica("replica-b", schedule.Config{})
	sc := e.add(a, "@every 1m", "daily digest")
	e.clock.add(time.Minute)
	if err := a.Pass(context.Background()); err == nil {
		t.Fatal("the pass of the replica that died reported no error")
	}
	e.clock.add(4 * time.Second)
	pass(t, b)
	runs := e.runs(sc.ID)
	posts := e.tickPosts()
	if len(runs) != 1 || runs[0].TS == "" || !runs[0].Found || runs[0].Attempt != 2 || len(posts[runs[0].ID()]) != 1 || len(posts) != 1 {
		t.Fatalf("runs %+v, posts %+v", runs, posts)
	}
	if n := e.emu.Calls("conversations.history"); n != 0 {
		t.Fatalf("%d conversations.history requests; the log has the post", n)
	}
}

// A replica that died after claiming a tick and before posting it: the next attempt finds no
// post and posts it, once.
func TestCrashBeforeThePostIsPostedByTheNextAttempt(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	b := e.replica("replica-b", schedule.Config{})
	sc := e.add(b, "*/10 * * * * *", "ping the canary")
	tick := sc.AddedAt.Truncate(10 * time.Second).Add(10 * time.Second)
	e.clock.add(tick.Sub(sc.AddedAt) + 100*time.Millisecond) // the next tick is 10 s away
	if _, ok, err := e.store.ClaimTick(context.Background(), session.Tick{Schedule: sc, At: tick}, "dead-replica", e.clock.Now().Add(3*time.Second)); !ok || err != nil {
		t.Fatalf("claim: %v %v", ok, err)
	}
	pass(t, b)
	if len(e.tickPosts()) != 0 {
		t.Fatal("posted while the dead replica's attempt was still its own")
	}
	e.clock.add(4 * time.Second)
	pass(t, b)
	runs := e.runs(sc.ID)
	if len(runs) != 1 || runs[0].TS == "" || runs[0].Found || runs[0].Attempt != 2 || len(e.tickPosts()[runs[0].ID()]) != 1 {
		t.Fatalf("runs %+v, posts %+v", runs, e.tickPosts())
	}
	// The dead replica never recorded that it was about to post: nothing was sent, and the
	// channel's history is not read.
	if n := e.emu.Calls("conversations.history"); n != 0 {
		t.Fatalf("%d conversations.history requests for a tick the log says was never posted", n)
	}
}

// Every replica down for a minute: of the ticks missed, only the newest runs, once, late, and
// its post says so and how many were skipped; ticks within their grace run as usual, and a
// second pass at the same moment runs nothing more.
func TestMissedTicksRunLateOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a, b := e.replica("replica-a", schedule.Config{}), e.replica("replica-b", schedule.Config{})
	sc := e.add(a, "@every 2s", "report")
	e.clock.add(61 * time.Second) // ticks at 2, 4, ..., 60 (whole seconds); grace 5s: 58 and 60 on time
	pass(t, a, b)
	pass(t, a, b)
	runs := e.runs(sc.ID)
	var late []session.TickRun
	for _, r := range runs {
		if r.Late {
			late = append(late, r)
		}
	}
	if len(late) != 1 || len(runs) != 3 {
		t.Fatalf("runs %+v: want one late and two on time", runs)
	}
	l := late[0]
	if want := sc.AddedAt.Truncate(time.Second).Add(56 * time.Second); !l.At.Equal(want) || l.Missed != 27 {
		t.Fatalf("late run %+v, want tick %v standing for 27 skipped", l, want)
	}
	p := e.tickPosts()[l.ID()]
	if len(p) != 1 || !strings.Contains(p[0].Text, "*late*") || !strings.Contains(p[0].Text, "27 earlier ticks were skipped") ||
		!strings.Contains(p[0].Text, "runs 5s late, because no replica of logbook ran it within its grace") {
		t.Fatalf("late post: %+v", p)
	}
	// Reported as metrics too, once across the replicas.
	if late, missed := a.Late()+b.Late(), a.Missed()+b.Missed(); late != 1 || missed != 27 {
		t.Fatalf("metrics: %v late, %v missed; want 1 and 27", late, missed)
	}
	if len(e.tickPosts()) != 3 {
		t.Fatalf("posts: %d", len(e.tickPosts()))
	}
	// An hour down with a schedule of every second: one late run standing for the rest.
	fast := e.add(a, "@every 1s", "heartbeat")
	e.clock.add(time.Hour)
	pass(t, a, b)
	runs = e.runs(fast.ID)
	if len(runs) != 6 || !runs[0].Late || runs[0].Missed != 3594 || runs[1].Late {
		t.Fatalf("after an hour of @every 1s: %d runs, first %+v", len(runs), runs[0])
	}
	// Both schedules were down the hour: the metrics count what the records say.
	var lateRuns, missedTicks float64
	for _, r := range append(e.runs(sc.ID), e.runs(fast.ID)...) {
		if r.Late {
			lateRuns++
			missedTicks += float64(r.Missed)
		}
	}
	if late, missed := a.Late()+b.Late(), a.Missed()+b.Missed(); late != lateRuns || missed != missedTicks || late != 3 {
		t.Fatalf("metrics after the hour: %v late, %v missed; the records say %v and %v", late, missed, lateRuns, missedTicks)
	}
}

// The commands: only admins add and remove; a spec is checked (syntax, the least interval);
// the prompt never pings; list shows the channel's schedules; a removed schedule ticks no more;
// help has the schedule line.
func TestCommands(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	s := e.replica("replica-a", schedule.Config{MinInterval: time.Minute})
	for _, c := range []struct{ user, text, want string }{
		{other, `schedule add "@every 1h" hi`, "Only logbook's admins"},
		{admin, `schedule add @every 1h hi`, "Put the cron spec in quotes"},
		{admin, `schedule add "not a spec" hi`, "was not added"},
		{admin, `schedule add "@every 2s" hi`, "LOGBOOK_SCHEDULE_MIN_INTERVAL"},
		{admin, `schedule add "@every 1h"`, "Say what each tick should ask"},
		{admin, `schedule`, "/logbook schedule add"},
		{admin, `schedule remove x`, "Say which schedule"},
		{admin, `schedule remove 99`, "There is no schedule 99"},
		{admin, `schedule list`, "no schedules"},
		{admin, `search x`, "There is no `/logbook search`"},
	} {
		if got := e.slash(s, c.user, c.text); !strings.Contains(got, c.want) {
			t.Errorf("%s %q: %q, want %q", c.user, c.text, got, c.want)
		}
	}
	if got := e.slash(s, admin, "help"); !strings.Contains(got, "/logbook schedule add") {
		t.Errorf("help: %q", got)
	}
	sc := e.add(s, "CRON_TZ=Europe/Paris 0 9 * * MON-FRI", "<!channel> @here standup <@U0000002>")
	if sc.Spec != "CRON_TZ=Europe/Paris 0 9 * * MON-FRI" || sc.AddedBy != admin {
		t.Fatalf("stored: %+v", sc)
	}
	if got := e.slash(s, other, "schedule list"); !strings.Contains(got, "CRON_TZ=Europe/Paris 0 9 * * MON-FRI") ||
		strings.Contains(got, "<!channel>") || strings.Contains(got, "<@U0000002>") {
		t.Fatalf("list: %q", got)
	}
	// “Curly quotes”, as Slack's composer may type them.
	if got := e.slash(s, admin, "schedule add “@every 1m” curly"); !strings.Contains(got, "added") {
		t.Fatalf("curly: %q", got)
	}
	if got := e.slash(s, admin, "schedule remove "+itoa(sc.ID)); !strings.Contains(got, "removed") {
		t.Fatalf("remove: %q", got)
	}
	if got := e.slash(s, admin, "schedule remove "+itoa(sc.ID)); !strings.Contains(got, "There is no schedule") {
		t.Fatalf("remove twice: %q", got)
	}
	all, err := e.store.Schedules(context.Background(), "", general, true)
	if err != nil || len(all) != 2 || !all[0].Removed || all[0].RemovedBy != admin {
		t.Fatalf("records: %+v %v", all, err)
	}
	// The prompt of a tick never pings.
	e.clock.add(time.Minute + 5*time.Second)
	pass(t, s)
	posts := e.tickPosts()
	if len(posts) != 1 {
		t.Fatalf("posts after a minute: %+v", posts)
	}
	if _, err := e.store.RemoveSchedule(context.Background(), e.emu.TeamID(), all[1].ID, admin); err != nil {
		t.Fatal(err)
	}
	e.clock.add(5 * time.Minute)
	pass(t, s)
	if len(e.tickPosts()) != 1 {
		t.Fatalf("a removed schedule ticked: %+v", e.tickPosts())
	}
}

// What a tick posts quotes the prompt escaped: no broadcast, no mention, no link reaches Slack.
func TestTickPostNeverPings(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	s := e.replica("replica-a", schedule.Config{})
	sc := e.add(s, "@every 5s", "<!channel> <!here> @everyone <@U0000002> <https://evil.example|click>")
	e.clock.add(5 * time.Second)
	pass(t, s)
	r := e.runs(sc.ID)
	if len(r) != 1 {
		t.Fatalf("runs %+v", r)
	}
	p := e.tickPosts()[r[0].ID()]
	if len(p) != 1 {
		t.Fatalf("posts %+v", p)
	}
	for _, bad := range []string{"<!channel>", "<!here>", "<@U0000002>", "<https://", "@everyone"} {
		if strings.Contains(p[0].Text, bad) {
			t.Fatalf("post holds %q: %q", bad, p[0].Text)
		}
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// Specs that robfig/cron panics on (a time zone with nothing after it) and @every intervals
// under a second are refused with an error, through Parse and through the command; a second,
// the default least interval, is taken.
func TestParseRefusesWhatCronPanicsOn(t *testing.T) {
	t.Parallel()
	for _, spec := range []string{"CRON_TZ=UTC", "CRON_TZ=", "TZ=UTC", "TZ=", "CRON_TZ=UTC\t* * * * *", "CRON_TZ=UTC   ",
		"@every 0s", "@every -1s", "@every 1ns", "@every 999ms", "CRON_TZ=UTC @every 0s"} {
		if c, err := schedule.Parse(spec); err == nil || c != nil {
			t.Errorf("Parse(%q) = %v, %v; want an error", spec, c, err)
		}
	}
	for _, spec := range []string{"@every 1s", "CRON_TZ=UTC * * * * *", "TZ=Europe/Paris @every 2s", "*/1 * * * * *"} {
		if _, err := schedule.Check(spec, time.Now(), time.Second); err != nil {
			t.Errorf("Check(%q): %v", spec, err)
		}
	}
	e := newEnv(t)
	s := e.replica("replica-a", schedule.Config{})
	for _, spec := range []string{"CRON_TZ=UTC", "CRON_TZ=", "@every 0s", "@every -1s", "@every 1ns"} {
		if got := e.slash(s, admin, `schedule add "`+spec+`" x`); !strings.Contains(got, "was not added") {
			t.Errorf("add %q: %q", spec, got)
		}
	}
	if scheds, err := e.store.Schedules(context.Background(), "", "", true); err != nil || len(scheds) != 0 {
		t.Fatalf("schedules after refusals: %+v %v", scheds, err)
	}
	// A channel holds at most MaxPerChannel schedules.
	for i := range schedule.MaxPerChannel {
		if got := e.slash(s, admin, `schedule add "@every 1h" n`+strconv.Itoa(i)); !strings.Contains(got, "added") {
			t.Fatalf("add %d: %q", i, got)
		}
	}
	if got := e.slash(s, admin, `schedule add "@every 1h" one too many`); !strings.Contains(got, "the most it may have") {
		t.Fatalf("over the cap: %q", got)
	}
}

// Two replicas whose own clocks are off — one ten minutes fast, one ten seconds slow — pass at
// the same moments, twice each per step: the database's clock decides, so every tick is posted
// once, on time, none says it is late, and no attempt still running is taken over.
func TestSkewedReplicasPostEachTickOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	fast := e.replica("replica-fast", schedule.Config{Clock: skewed{e.clock, 10 * time.Minute}})
	slow := e.replica("replica-slow", schedule.Config{Clock: skewed{e.clock, -10 * time.Second}})
	sc := e.add(fast, "@every 2s", "check the queue depth")
	for range 24 { // 12 s of ticks
		e.clock.add(500 * time.Millisecond)
		pass(t, fast, slow, fast, slow)
	}
	runs, posts := e.runs(sc.ID), e.tickPosts()
	if len(runs) != 6 || len(posts) != 6 {
		t.Fatalf("%d runs and %d ticks posted over 12s of @every 2s, want 6 each: %+v", len(runs), len(posts), runs)
	}
	for i, r := range runs {
		want := sc.AddedAt.Add(time.Duration(i+1) * 2 * time.Second).Truncate(time.Second)
		if !r.At.Equal(want) || r.Late || r.Missed != 0 || r.Attempt != 1 || r.TS == "" {
			t.Fatalf("run %d: %+v, want tick %v on time, one attempt", i, r, want)
		}
		if p := posts[r.ID()]; len(p) != 1 || strings.Contains(p[0].Text, "late") {
			t.Fatalf("tick %s: %+v", r.ID(), p)
		}
	}
}

// Slack refusing a tick's post for good (the bot is not in the channel) makes the tick final:
// recorded failed after one attempt, not retried every ClaimTTL; the next tick is tried as
// usual.
func TestPermanentRefusalIsFinal(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	s := e.replica("replica-a", schedule.Config{})
	sc := e.add(s, "@every 1m", "digest")
	e.emu.InjectMethodFault(slackemu.MethodFault{Method: "chat.postMessage", Error: "not_in_channel", Times: 1})
	e.clock.add(time.Minute)
	if err := s.Pass(context.Background()); err == nil {
		t.Fatal("the refused post reported no error")
	}
	for range 5 { // well past the attempt's expiry, still within the tick's retry window
		e.clock.add(4 * time.Second)
		pass(t, s)
	}
	runs := e.runs(sc.ID)
	if len(runs) != 1 || runs[0].Attempt != 1 || runs[0].TS != "" || !strings.Contains(runs[0].Failed, "not_in_channel") {
		t.Fatalf("runs %+v: want one attempt, recorded failed", runs)
	}
	e.clock.add(time.Minute)
	pass(t, s)
	if runs := e.runs(sc.ID); len(runs) != 2 || runs[1].TS == "" {
		t.Fatalf("the next tick: %+v", runs)
	}
}

// A schedule whose admin has left LOGBOOK_ADMINS stops at its next tick: nothing is posted, and
// the schedule is recorded removed by the system, saying why.
func TestScheduleStopsWhenItsAdminLeaves(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	sc := e.add(e.replica("replica-a", schedule.Config{}), "@every 5s", "report")
	later := e.replica("replica-b", schedule.Config{Admins: []string{other}})
	e.clock.add(5 * time.Second)
	pass(t, later)
	if len(e.tickPosts()) != 0 || len(e.runs(sc.ID)) != 0 {
		t.Fatalf("a schedule of a former admin ticked: %+v", e.runs(sc.ID))
	}
	all, err := e.store.Schedules(context.Background(), "", general, true)
	if err != nil || len(all) != 1 || !all[0].Removed || all[0].RemovedBy != "system" || !strings.Contains(all[0].RemovedWhy, "LOGBOOK_ADMINS") {
		t.Fatalf("records: %+v %v", all, err)
	}
}

// A schedule is refused where its ticks could never post, or would post outside the
// organisation: a channel logbook is not in, an archived one, one shared via Slack Connect.
func TestAddChecksTheChannel(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	s := e.replica("replica-a", schedule.Config{})
	e.emu.AddChannel(slackemu.Channel{ID: "C0000077", Name: "no-bot", Members: []string{admin}})
	e.emu.AddChannel(slackemu.Channel{ID: "C0000078", Name: "old", Members: []string{admin, e.emu.BotUserID()}, Archived: true})
	e.emu.AddChannel(slackemu.Channel{ID: "C0000079", Name: "shared", Members: []string{admin, e.emu.BotUserID()}})
	if _, err := e.emu.ShareChannel("C0000079", "T0000099"); err != nil {
		t.Fatal(err)
	}
	// A private channel: logbook keeps no record there, so its sessions must not start there.
	e.emu.AddChannel(slackemu.Channel{ID: "G0000080", Name: "secret", Members: []string{admin, e.emu.BotUserID()}, Private: true})
	for ch, want := range map[string]string{"C0000077": "not a member", "C0000078": "archived", "C0000079": "Slack Connect", "G0000080": "private"} {
		if got := e.slashIn(s, ch, admin, `schedule add "@every 1h" hi`); !strings.Contains(got, want) {
			t.Errorf("%s: %q, want %q", ch, got, want)
		}
	}
	if scheds, err := e.store.Schedules(context.Background(), "", "", true); err != nil || len(scheds) != 0 {
		t.Fatalf("schedules: %+v %v", scheds, err)
	}
}

// A schedule whose ticks fail three times in a row (LOGBOOK_AUTOMATION_MAX_FAILURES) pauses
// itself: once, recorded, said in its channel naming the admins who may resume it; it ticks no
// more, on this replica or a restarted one; /logbook schedule list shows it paused with its
// failed runs; only an admin resumes it, and it ticks on from then, the ticks due while paused
// not run late.
func TestScheduleFailingInARowPausesItself(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cfg := schedule.Config{MaxFailures: 3, Admins: []string{admin, "U0000003"}}
	a, b := e.replica("replica-a", cfg), e.replica("replica-b", cfg)
	sc := e.add(a, "@every 1m", "digest")
	e.emu.InjectMethodFault(slackemu.MethodFault{Method: "chat.postMessage", Error: "not_in_channel", Times: 3})
	notices := func() []slackemu.Message {
		var out []slackemu.Message
		for _, m := range e.emu.History(general) {
			if len(m.Metadata) == 0 && strings.Contains(m.Text, "paused itself") {
				out = append(out, m)
			}
		}
		return out
	}
	for i := range 3 {
		e.clock.add(time.Minute)
		pass2(a, b)
		if n := len(notices()); (i < 2 && n != 0) || (i == 2 && n != 1) {
			t.Fatalf("after %d failed ticks: %d notices", i+1, n)
		}
	}
	n := notices()[0].Text
	for _, want := range []string{"*Schedule " + itoa(sc.ID) + "*", "last 3 ticks failed", "not_in_channel", "<@" + admin + ">", "<@U0000003>",
		"`/logbook schedule resume " + itoa(sc.ID) + "`"} {
		if !strings.Contains(n, want) {
			t.Errorf("notice %q lacks %q", n, want)
		}
	}
	// Paused: no tick on either replica, nor on one started afresh.
	restarted := e.replica("replica-c", cfg)
	for range 3 {
		e.clock.add(time.Minute)
		pass(t, a, b, restarted)
	}
	if runs := e.runs(sc.ID); len(runs) != 3 {
		t.Fatalf("a paused schedule ticked: %+v", runs)
	}
	list := e.slash(a, other, "schedule list")
	if !strings.Contains(list, "*paused*") || strings.Count(list, "failed: `") != 3 {
		t.Fatalf("list of a paused schedule: %s", list)
	}
	if got := e.slash(a, other, "schedule resume "+itoa(sc.ID)); !strings.Contains(got, "Only logbook's admins") {
		t.Fatalf("a non-admin resumed: %s", got)
	}
	if got := e.slash(a, admin, "schedule resume "+itoa(sc.ID)); !strings.Contains(got, "resumed by <@"+admin+">") {
		t.Fatalf("resume: %s", got)
	}
	if got := e.slash(a, admin, "schedule resume "+itoa(sc.ID)); !strings.Contains(got, "is not paused") {
		t.Fatalf("resume twice: %s", got)
	}
	e.clock.add(time.Minute)
	pass(t, a, b)
	runs := e.runs(sc.ID)
	if len(runs) != 4 || runs[3].TS == "" || runs[3].Late {
		t.Fatalf("after the resume: %+v", runs)
	}
	list = e.slash(a, other, "schedule list")
	if strings.Contains(list, "*paused*") || !strings.Contains(list, " ran, session `") {
		t.Fatalf("list after the resume: %s", list)
	}
}

// pass2 runs one pass of each scheduler at once, as replicas do, the passes' errors (failed
// ticks) expected.
func pass2(ss ...*schedule.Scheduler) {
	var wg sync.WaitGroup
	for _, s := range ss {
		wg.Go(func() { _ = s.Pass(context.Background()) })
	}
	wg.Wait()
}

// waitClock is the test clock whose After tells the test how long Run waits (waits) and
// never fires: a pass happens only when Run is asked for one.
type waitClock struct {
	*clock
	waits chan time.Duration
}

func (c waitClock) After(d time.Duration) <-chan time.Time {
	c.waits <- d
	return nil
}

// #53: an idle replica's scheduler made four statements a second (a pass every second). Run
// now waits until the next tick of the schedules it read, at most Config.Poll (10 s by
// default), and a schedule added on this replica is looked at at once.
func TestRunWaitsForTheNextTickOrThePoll(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	waits := make(chan time.Duration)
	s := e.replica("replica-a", schedule.Config{Clock: waitClock{e.clock, waits}})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	next := func(what string) time.Duration {
		t.Helper()
		select {
		case d := <-waits:
			return d
		case <-time.After(30 * time.Second):
			t.Fatalf("Run never waited %s", what)
			return 0
		}
	}
	if d := next("with no schedules"); d != 10*time.Second {
		t.Fatalf("with no schedules Run waits %v, want the default poll of 10s", d)
	}
	e.add(s, "@every 4s", "check the queue depth") // Run is asked for a pass at once
	if d := next("after a schedule was added"); d < 100*time.Millisecond || d > 4*time.Second {
		t.Fatalf("with a schedule every 4s Run waits %v, want at most until its next tick", d)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
