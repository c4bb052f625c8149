package followup_test

import (
	"context"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/logbook/logbook/bot/followup"
	"github.com/logbook/logbook/bot/forge"
	"github.com/logbook/logbook/bot/forge/forgetest"
	"github.com/logbook/logbook/migrations/pgtest"
	"github.com/logbook/logbook/session"
	"github.com/logbook/logbook/session/logtest"
)

// simClock is the fleet's clock in a simulated hour: a replica's After registers a timer, and
// the driver (run) moves the time to the earliest timer once every replica waits on one.
type simClock struct {
	mu         sync.Mutex
	now        time.Time
	timers     []simTimer
	registered chan struct{} // a timer was added (coalesced)
}

type simTimer struct {
	replica int
	at      time.Time
	ch      chan time.Time
}

func newSimClock() *simClock {
	return &simClock{now: time.Date(2025, 3, 3, 9, 0, 0, 0, time.UTC), registered: make(chan struct{}, 1)}
}

func (c *simClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// after is replica's time.After.
func (c *simClock) after(replica int) func(time.Duration) <-chan time.Time {
	return func(d time.Duration) <-chan time.Time {
		c.mu.Lock()
		ch := make(chan time.Time, 1)
		c.timers = append(c.timers, simTimer{replica: replica, at: c.now.Add(max(d, 0)), ch: ch})
		c.mu.Unlock()
		select {
		case c.registered <- struct{}{}:
		default:
		}
		return ch
	}
}

// forget drops the timers of a replica that stopped.
func (c *simClock) forget(replica int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.timers = slices.DeleteFunc(c.timers, func(tm simTimer) bool { return tm.replica == replica })
}

func (c *simClock) waiting() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.timers)
}

// run moves the clock on until end: each step waits until every live replica's poller waits
// on the clock (one timer each), then moves to the earliest timer and fires every timer due.
// at is called with each new time, before the timers fire (a test's changes on GitHub).
func (c *simClock) run(t *testing.T, alive func() int, end time.Time, at func(time.Time)) {
	t.Helper()
	for {
		for c.waiting() < alive() {
			select {
			case <-c.registered:
			case <-time.After(time.Minute): // a guard against a hang, not a timing
				t.Fatalf("only %d of %d pollers wait on the clock at %s", c.waiting(), alive(), c.Now())
			}
		}
		c.mu.Lock()
		next := slices.MinFunc(c.timers, func(a, b simTimer) int { return a.at.Compare(b.at) }).at
		if !next.Before(end) {
			c.mu.Unlock()
			return
		}
		c.now = next
		c.mu.Unlock()
		if at != nil {
			at(next)
		}
		c.mu.Lock()
		kept := c.timers[:0]
		for _, tm := range c.timers {
			if tm.at.After(c.now) {
				kept = append(kept, tm)
				continue
			}
			tm.ch <- c.now
		}
		c.timers = kept
		c.mu.Unlock()
	}
}

// clockedStore is the log with the database's clock (Store.Now) on the fleet's simulated clock.
type clockedStore struct {
	*session.Store
	c *simClock
}

func (s clockedStore) Now(context.Context) (time.Time, error) { return s.c.Now(), nil }

// request is one request a replica made to GitHub, when (on the fleet's clock), and its answer.
type request struct {
	replica int
	at      time.Time
	path    string
	status  int
}

// wire is the replicas' HTTP to GitHub, recording every request.
type wire struct {
	mu   sync.Mutex
	c    *simClock
	reqs []request
}

func (w *wire) client(replica int) *http.Client {
	return &http.Client{Timeout: 30 * time.Second, Transport: roundTrip(func(r *http.Request) (*http.Response, error) {
		resp, err := http.DefaultTransport.RoundTrip(r)
		status := 0
		if err == nil {
			status = resp.StatusCode
		}
		w.mu.Lock()
		w.reqs = append(w.reqs, request{replica: replica, at: w.c.Now(), path: r.URL.Path, status: status})
		w.mu.Unlock()
		return resp, err
	})}
}

func (w *wire) all() []request {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.reqs)
}

type roundTrip func(*http.Request) (*http.Response, error)

func (f roundTrip) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

var pullPath = regexp.MustCompile(`/pulls/(\d+)$`)

// looks are the looks among reqs at pull request number (each reads the pull request once).
func looks(reqs []request, number int) []request {
	var out []request
	for _, r := range reqs {
		if m := pullPath.FindStringSubmatch(r.path); m != nil && m[1] == fmt.Sprint(number) {
			out = append(out, r)
		}
	}
	return out
}

// fleet is prs pull requests, each opened and followed by its own session, on a fake GitHub
// whose clock is the fleet's.
type fleet struct {
	store  clockedStore
	gh     *forgetest.Server
	clock  *simClock
	wire   *wire
	logs   *logtest.Buffer
	sess   []session.Session
	branch []string
}

func newFleet(t *testing.T, prs int) *fleet {
	t.Helper()
	ctx := context.Background()
	pool, err := session.Connect(ctx, pgtest.New(t), session.PoolOptions{Role: "logbook_app", MaxConns: 16})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	c := newSimClock()
	fl := &fleet{store: clockedStore{Store: session.NewStore(pool, session.Options{}), c: c}, clock: c, wire: &wire{c: c}, logs: &logtest.Buffer{}}
	for i := range prs {
		fl.branch = append(fl.branch, fmt.Sprintf("logbook/fix-%d", i+1))
	}
	fl.gh = forgetest.New(t, forgetest.Options{Token: "tok", Repo: repo, Branches: fl.branch, Now: c.Now})
	opener := forge.NewGitHub(fl.gh.URL, "tok", nil)
	for i, b := range fl.branch {
		sess, err := fl.store.Open(ctx, session.ThreadKey{Team: "T0000001", Channel: "C0000001", ThreadTS: fmt.Sprintf("1700000000.%06d", i+1)})
		if err != nil {
			t.Fatal(err)
		}
		pr, err := opener.CreatePull(ctx, forge.Repo{Owner: "acme", Name: "api", Base: "main"}, b, "Fix "+b, "")
		if err != nil {
			t.Fatal(err)
		}
		fl.gh.SetHead(b, fmt.Sprintf("%02x%038d", i+1, 0))
		rec := session.PullRequest{Repo: repo, Branch: b, Base: "main", Number: pr.Number, URL: pr.HTMLURL}
		sub := followup.New(fl.store, opener, followup.Config{}).Subscription(rec, "U0000001")
		if _, err := fl.store.Append(ctx, sess.ID, session.NewEvent{Type: session.TypePullRequest, Actor: session.Actor{Kind: session.ActorSystem, ID: "forge"},
			Payload: rec}, sub); err != nil {
			t.Fatal(err)
		}
		fl.sess = append(fl.sess, sess)
	}
	return fl
}

// replicas runs n pollers (each a replica: its own client of GitHub) until the returned stop.
// stop(i) stops replica i alone; stop(-1) all of them.
func (fl *fleet) replicas(t *testing.T, n int) (alive func() int, stop func(int)) {
	t.Helper()
	var mu sync.Mutex
	running := n
	cancels := make([]context.CancelFunc, n)
	dones := make([]chan error, n)
	for i := range n {
		ctx, cancel := context.WithCancel(context.Background())
		cancels[i], dones[i] = cancel, make(chan error, 1)
		f := followup.New(fl.store, forge.NewGitHub(fl.gh.URL, "tok", fl.wire.client(i)), followup.Config{
			Poll: time.Minute, After: fl.clock.after(i), Now: fl.clock.Now, Log: zerolog.New(fl.logs).With().Int("replica", i).Logger()})
		go func() { dones[i] <- f.Poll(ctx) }()
	}
	stopped := make([]bool, n)
	stop = func(i int) {
		for j := range n {
			if (i >= 0 && j != i) || stopped[j] {
				continue
			}
			cancels[j]()
			if err := <-dones[j]; err != nil {
				t.Errorf("replica %d: %v", j, err)
			}
			stopped[j] = true
			fl.clock.forget(j)
			mu.Lock()
			running--
			mu.Unlock()
		}
	}
	t.Cleanup(func() { stop(-1) })
	return func() int {
		mu.Lock()
		defer mu.Unlock()
		return running
	}, stop
}

func (fl *fleet) signals(t *testing.T, i int) []session.FollowupSignal {
	t.Helper()
	evs, err := fl.store.Events(context.Background(), fl.sess[i].ID, session.Range{Types: []session.Type{session.TypeFollowupSignal}})
	if err != nil {
		t.Fatal(err)
	}
	out := make([]session.FollowupSignal, len(evs))
	for j, e := range evs {
		if err := e.Decode(&out[j]); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// Issue 48: however many replicas poll, each followed pull request is looked at once per
// interval across them, and a look at what did not change is answered 304 Not Modified, free
// against GitHub's rate limit. An hour at LOGBOOK_FOLLOWUP_POLL=60s, on a simulated clock, with
// two pull requests; halfway, a check fails on the first, and that is stored once.
func TestPollOncePerIntervalAcrossReplicas(t *testing.T) {
	for _, n := range []int{1, 10} {
		t.Run(fmt.Sprintf("%d replicas", n), func(t *testing.T) {
			t.Parallel()
			fl := newFleet(t, 2)
			start := fl.clock.Now()
			alive, stop := fl.replicas(t, n)
			failed := false
			fl.clock.run(t, alive, start.Add(time.Hour), func(now time.Time) {
				if !failed && !now.Before(start.Add(30*time.Minute)) {
					failed = true
					fl.gh.AddCheckRun(fl.gh.Head(fl.branch[0]), forgetest.Check{Name: "test", Conclusion: "failure"})
				}
			})
			stop(-1)
			reqs := fl.wire.all()
			for pr := 1; pr <= 2; pr++ {
				c := fl.gh.CountsOf(pr)
				pollers := map[int]bool{}
				for _, r := range looks(reqs, pr) {
					pollers[r.replica] = true
				}
				t.Logf("%d replicas, pull request #%d, one hour at 60s: %d looks (by %d replicas), %d requests to GitHub, %d of them 304 Not Modified, %d charged to the rate limit",
					n, pr, len(looks(reqs, pr)), len(pollers), c.Requests, c.NotModified, c.Charged())
				if l := len(looks(reqs, pr)); l < 58 || l > 61 {
					t.Errorf("pull request #%d: %d looks in the hour, want 60 (one per interval across the fleet)", pr, l)
				}
				if c.Charged() > 20 {
					t.Errorf("pull request #%d: %d of %d requests charged to the rate limit, want most answered 304", pr, c.Charged(), c.Requests)
				}
			}
			if sigs := fl.signals(t, 0); len(sigs) != 1 || sigs[0].Kind != session.SignalCheckFailed {
				t.Errorf("first pull request's signals: %+v, want the failed check once", sigs)
			}
			if sigs := fl.signals(t, 1); len(sigs) != 0 {
				t.Errorf("second pull request's signals: %+v, want none", sigs)
			}
		})
	}
}

// A replica that dies does not stop the polling: another takes its pull requests over once
// their looks are late, and the fleet still looks at each once per interval.
func TestPollTakenOverWhenReplicaDies(t *testing.T) {
	t.Parallel()
	fl := newFleet(t, 1)
	start := fl.clock.Now()
	alive, stop := fl.replicas(t, 3)
	fl.clock.run(t, alive, start.Add(10*time.Minute), nil)
	before := looks(fl.wire.all(), 1)
	if len(before) == 0 {
		t.Fatal("no look in ten minutes")
	}
	owner := before[len(before)-1].replica
	stop(owner)
	killed := fl.clock.Now()
	fl.clock.run(t, alive, start.Add(30*time.Minute), nil)
	all := looks(fl.wire.all(), 1)
	after := all[len(before):]
	if len(after) == 0 {
		t.Fatalf("replica %d died at %s; nobody looked since", owner, killed.Sub(start))
	}
	for _, r := range after {
		if r.replica == owner {
			t.Fatalf("the dead replica %d looked at %s", owner, r.at.Sub(start))
		}
	}
	if late := after[0].at.Sub(before[len(before)-1].at); late > 2*time.Minute {
		t.Errorf("the first look after replica %d died came %s after its last, want within the interval and the takeover's margin", owner, late)
	}
	t.Logf("3 replicas, 30 minutes: %d looks before the owner died at %s, %d after (first %s after its last)",
		len(before), killed.Sub(start), len(after), after[0].at.Sub(before[len(before)-1].at))
	if len(all) < 28 || len(all) > 31 {
		t.Errorf("%d looks in 30 minutes, want 30: one per interval across the fleet", len(all))
	}
}

// GitHub's rate limit pauses the polling, fleet-wide, and it is said once: a look whose
// answers leave no request (x-ratelimit-remaining 0) makes every replica wait for
// x-ratelimit-reset; a secondary limit's 429 waits its retry-after. Nothing is asked of
// GitHub meanwhile, and polling goes on after.
func TestPollBacksOffOnRateLimit(t *testing.T) {
	t.Parallel()
	fl := newFleet(t, 1)
	start := fl.clock.Now()
	reset := start.Add(20 * time.Minute)
	// The first look's four requests take what is left.
	fl.gh.SetRateLimit(5000, 4, reset)
	alive, _ := fl.replicas(t, 2)
	limited := false
	fl.clock.run(t, alive, start.Add(45*time.Minute), func(now time.Time) {
		if !limited && !now.Before(start.Add(30*time.Minute)) {
			limited = true
			fl.gh.LimitNext(1, 5*time.Minute)
		}
	})
	reqs := fl.wire.all()
	var during, after, secondary []request
	var refusedAt time.Time
	for _, r := range reqs {
		switch {
		case r.at.After(start) && r.at.Before(reset):
			during = append(during, r)
		case r.status == http.StatusTooManyRequests:
			refusedAt = r.at
		case !refusedAt.IsZero() && r.at.Before(refusedAt.Add(5*time.Minute)):
			secondary = append(secondary, r)
		case !r.at.Before(reset):
			after = append(after, r)
		}
	}
	t.Logf("2 replicas: %d requests before x-ratelimit-reset (20 minutes), %d in the 5 minutes of a retry-after, %d otherwise after the reset; %d refused for the rate limit",
		len(during), len(secondary), len(after), fl.gh.Counts().Limited)
	if len(during) != 0 {
		t.Errorf("%d requests to GitHub between the limit's exhaustion and its reset: %+v", len(during), during[:min(len(during), 5)])
	}
	if refusedAt.IsZero() {
		t.Fatal("no look met the secondary limit")
	}
	if len(secondary) != 0 {
		t.Errorf("%d requests to GitHub within the secondary limit's retry-after: %+v", len(secondary), secondary[:min(len(secondary), 5)])
	}
	if len(looks(after, 1)) < 15 {
		t.Errorf("%d looks in the 20 minutes after the reset, outside the retry-after: polling did not go on", len(looks(after, 1)))
	}
	if c := fl.gh.Counts(); c.Limited != 1 {
		t.Errorf("%d requests refused for the rate limit, want the one 429", c.Limited)
	}
	if n := strings.Count(fl.logs.String(), "paused on every replica"); n != 2 {
		t.Errorf("the pauses were logged %d times, want once each:\n%s", n, fl.logs.String())
	}
}
