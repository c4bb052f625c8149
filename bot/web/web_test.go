package web_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"

	"github.com/logbook/logbook/bot/settings"
	"github.com/logbook/logbook/bot/web"
	"github.com/logbook/logbook/migrations/pgtest"
	"github.com/logbook/logbook/session"
	"github.com/logbook/logbook/session/search"
)

const (
	tokenSecret   = "s3cret-token-0123456789"
	auditorSecret = "auditor-token-0123456789"
	proxyHeader   = "X-Forwarded-Email"
)

// visibility is a hand-written ChannelVisibility: channels listed are private; errors for "broken".
type visibility struct {
	mu      sync.Mutex
	private map[string]bool
	calls   map[string]int
}

func (v *visibility) ChannelPrivate(_ context.Context, channel string) (bool, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.calls[channel]++
	if channel == "C0000BAD" {
		return false, errors.New("conversations.info: ratelimited")
	}
	return v.private[channel], nil
}

type fixture struct {
	t        *testing.T
	ctx      context.Context
	srv      *httptest.Server
	admin    *pgxpool.Pool
	app      *pgxpool.Pool
	store    *session.Store
	searcher *search.Searcher
	queries  *countingFinder // the pages' Finder: searcher, counting its searches
	vis      *visibility
	sessions map[string]session.ID // by title
}

// newFixture seeds a fresh database with three sessions — one in a channel that later became
// private — indexes them, and serves the pages.
func newFixture(t *testing.T) *fixture {
	t.Helper()
	ctx := context.Background()
	dbURL := pgtest.New(t)
	app, err := session.Connect(ctx, dbURL, session.PoolOptions{Role: "logbook_app"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(app.Close)
	admin, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(admin.Close)
	f := &fixture{t: t, ctx: ctx, admin: admin, app: app, store: session.NewStore(app, session.Options{}),
		vis:      &visibility{private: map[string]bool{"C0000003": true}, calls: map[string]int{}},
		sessions: map[string]session.ID{}}
	f.seed()
	log := zerolog.New(zerolog.NewTestWriter(t))
	ix := search.NewIndexer(f.store, app, log, search.IndexerOptions{})
	syncCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := ix.Sync(syncCtx); err != nil {
		t.Fatal(err)
	}
	f.searcher = search.NewSearcher(app, search.Options{WorkspaceDomain: "acme.slack.com"})
	f.queries = &countingFinder{Searcher: f.searcher}
	h, err := web.Handler(web.Config{
		Sessions: f.store, Finder: f.queries, AccessLog: app,
		Access: web.Access{
			Tokens:      []web.Token{{Name: "ci-bot", Secret: tokenSecret}, {Name: "audit-bot", Secret: auditorSecret, Auditor: true}},
			ProxyHeader: proxyHeader,
			Auditors:    []string{"Auditor@example.com"},
		},
		Visibility: f.vis,
		Channels:   channelNames{"C0000001": "general", "C0000002": "data"},
		SignIns:    f.store,
		Usage:      f.store, Feedback: f.store, Currency: "USD",
		Runs: f.store,
		Log:  log,
		ChannelSettings: settings.Reports{Store: f.store, Settings: settings.New(settings.Config{Store: f.store,
			Defaults:        map[string]string{settings.Model: "anthropic:claude-default", settings.Setup: "make"},
			DefaultFrom:     map[string]string{settings.Model: "LOGBOOK_MODEL", settings.Setup: "LOGBOOK_SETUP_COMMAND"},
			FromEnvironment: map[string]bool{settings.Model: true}})},
	})
	if err != nil {
		t.Fatal(err)
	}
	f.srv = httptest.NewServer(h)
	t.Cleanup(f.srv.Close)
	return f
}

// countingFinder is a Searcher that records the limit of every search page asked of it.
type countingFinder struct {
	*search.Searcher
	mu     sync.Mutex
	limits []int
}

func (c *countingFinder) SearchPage(ctx context.Context, q search.Query) (search.Page, error) {
	c.mu.Lock()
	c.limits = append(c.limits, q.Limit)
	c.mu.Unlock()
	return c.Searcher.SearchPage(ctx, q)
}

// take returns the limits asked since the last take.
func (c *countingFinder) take() []int {
	c.mu.Lock()
	defer c.mu.Unlock()
	l := c.limits
	c.limits = nil
	return l
}

// channelNames is a web.ChannelNamer over a fixed map.
type channelNames map[string]string

func (n channelNames) ChannelName(_ context.Context, id string) string { return n[id] }

var (
	alice = session.Actor{Kind: session.ActorUser, ID: "U0000001"}
	bot   = session.Actor{Kind: session.ActorBot, ID: "UB000001"}
	box   = session.Actor{Kind: session.ActorSandbox, ID: "bwrap"}
	sys   = session.Actor{Kind: session.ActorSystem, ID: "cell"}
)

func (f *fixture) seed() {
	f.t.Helper()
	open := func(channel, ts, title string, evs ...session.NewEvent) {
		s, err := f.store.Open(f.ctx, session.ThreadKey{Team: "T0000001", Channel: channel, ThreadTS: ts})
		if err != nil {
			f.t.Fatal(err)
		}
		evs = append(evs, session.NewEvent{Type: session.TypeTitle, Actor: bot, Payload: session.Title{Text: title}})
		if _, err := f.store.Append(f.ctx, s.ID, evs...); err != nil {
			f.t.Fatal(err)
		}
		f.sessions[title] = s.ID
	}
	user := func(channel, thread, ts, text string) session.NewEvent {
		return session.NewEvent{Type: session.TypeUserMessage, Actor: alice, IdempotencyKey: "m:" + ts,
			Payload: session.UserMessage{Team: "T0000001", Channel: channel, ThreadTS: thread, TS: ts, User: "U0000001",
				UserName: "alice", Text: text, Names: map[string]string{"UB000001": "logbook"}}}
	}
	exit := 1
	open("C0000001", "1700000000.001200", "billing-api crash loop",
		user("C0000001", "1700000000.001200", "1700000000.001200", "@logbook why is billing-api failing with a timeout? :eyes:"),
		session.NewEvent{Type: session.TypeTurnStarted, Actor: sys, Payload: session.TurnStarted{Through: 1}},
		session.NewEvent{Type: session.TypeToolCall, Actor: bot, Payload: session.ToolCall{CallID: "c1", Name: "shell", Input: json.RawMessage(`{"cmd":"kubectl logs deploy/billing-api"}`)}},
		session.NewEvent{Type: session.TypeToolResult, Actor: box, Payload: session.ToolResult{CallID: "c1", Content: "panic: dial tcp 10.0.0.5:5432: i/o timeout", ExitCode: &exit}},
		session.NewEvent{Type: session.TypeAssistantMessage, Actor: bot, Payload: session.AssistantMessage{Text: "The pods cannot reach Postgres:\n```\npanic: dial tcp 10.0.0.5:5432: i/o timeout\n```\nThe security group lost its rule. 🔧"}},
		user("C0000001", "1700000000.001200", "1700000050.000100", "deploy to staging"),
		user("C0000001", "1700000000.001200", "1700000060.000100", "token is sk-XXXX"),
		session.NewEvent{Type: session.TypeUserMessageEdited, Actor: alice, Payload: session.UserMessageEdited{OrigTS: "1700000050.000100", Text: "deploy to prod"}},
		session.NewEvent{Type: session.TypeUserMessageDeleted, Actor: alice, Payload: session.UserMessageDeleted{DeletedTS: "1700000060.000100"}},
		session.NewEvent{Type: session.TypeTurnCompleted, Actor: sys, Payload: session.TurnCompleted{Turn: 2, Status: "ok"}},
	)
	open("C0000002", "1700000100.000100", "kafka consumer lag",
		user("C0000002", "1700000100.000100", "1700000100.000100", "consumer lag on orders is 2M, is that a timeout too?"),
		session.NewEvent{Type: session.TypeAssistantMessage, Actor: bot, Payload: session.AssistantMessage{Text: "No: the consumer group is rebalancing."}},
	)
	open("C0000003", "1700000200.000100", "secret reorg plans",
		user("C0000003", "1700000200.000100", "1700000200.000100", "the reorg timeout is friday"),
	)
}

// get fetches path with the given headers and returns the status and body.
func (f *fixture) get(path string, headers map[string]string) (int, string, http.Header) {
	f.t.Helper()
	req, err := http.NewRequestWithContext(f.ctx, http.MethodGet, f.srv.URL+path, nil)
	if err != nil {
		f.t.Fatal(err)
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		f.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		f.t.Fatal(err)
	}
	return resp.StatusCode, string(b), resp.Header
}

var (
	asAlice   = map[string]string{proxyHeader: "alice@example.com"}
	asAuditor = map[string]string{proxyHeader: "auditor@example.com"}
	asToken   = map[string]string{"Authorization": "Bearer " + tokenSecret}
)

type accessRow struct {
	Who, Via, Action, Format, Query string
	Auditor                         bool
	Session                         *string
	Results, Status                 int
}

func (f *fixture) accessLog() []accessRow {
	f.t.Helper()
	rows, err := f.admin.Query(f.ctx, `SELECT who, via, action, coalesce(format, ''), coalesce(query, ''), auditor,
		session_id::text, coalesce(results, 0), status FROM access_log ORDER BY id`)
	if err != nil {
		f.t.Fatal(err)
	}
	defer rows.Close()
	var out []accessRow
	for rows.Next() {
		var r accessRow
		if err := rows.Scan(&r.Who, &r.Via, &r.Action, &r.Format, &r.Query, &r.Auditor, &r.Session, &r.Results, &r.Status); err != nil {
			f.t.Fatal(err)
		}
		out = append(out, r)
	}
	return out
}

func TestPagesAreClosedByDefault(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	for _, h := range []map[string]string{
		nil,
		{"Authorization": "Bearer wrong-token-000000000"},
		{"Authorization": "Basic " + tokenSecret},
		{"X-Forwarded-User": "alice"}, // not the configured header
	} {
		for _, path := range []string{"/", "/search?q=timeout", "/sessions/" + f.sessions["billing-api crash loop"].String()} {
			status, body, hdr := f.get(path, h)
			if status != http.StatusUnauthorized || hdr.Get("WWW-Authenticate") == "" {
				t.Errorf("%s with %v: status %d, want 401 with WWW-Authenticate", path, h, status)
			}
			if strings.Contains(body, "billing") || strings.Contains(body, "timeout") {
				t.Errorf("%s with %v: the 401 page shows workspace content", path, h)
			}
		}
	}
	// A wrong credential is a failed sign-in, recorded as anonymous (2 headers × 3 pages); a
	// request with none, or with a header that is not the configured one, is not.
	got := f.accessLog()
	for _, r := range got {
		if r.Action != "signin" || r.Who != "anonymous" || r.Via != "none" || r.Format != "bearer" || r.Status != http.StatusUnauthorized {
			t.Errorf("refused request recorded as %+v, want a failed bearer sign-in", r)
		}
	}
	if len(got) != 6 {
		t.Errorf("access log has %d rows for the 6 wrong credentials: %+v", len(got), got)
	}
	if _, err := web.Handler(web.Config{Sessions: f.store, Finder: f.searcher, AccessLog: f.app}); err == nil {
		t.Error("Handler accepted a configuration that admits nobody")
	}
	if _, err := web.Handler(web.Config{Sessions: f.store, Finder: f.searcher, AccessLog: f.app,
		Access: web.Access{Tokens: []web.Token{{Name: "x", Secret: "short"}}}}); err == nil {
		t.Error("Handler accepted a short token")
	}
}

func TestListHidesSessionsOfChannelsThatBecamePrivate(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	for _, c := range []struct {
		who        map[string]string
		seesSecret bool
	}{{asAlice, false}, {asToken, false}, {asAuditor, true}, {map[string]string{"Authorization": "Bearer " + auditorSecret}, true}} {
		status, body, _ := f.get("/", c.who)
		if status != http.StatusOK {
			t.Fatalf("list as %v: status %d", c.who, status)
		}
		for _, title := range []string{"billing-api crash loop", "kafka consumer lag"} {
			if !strings.Contains(body, title) {
				t.Errorf("list as %v lacks %q", c.who, title)
			}
		}
		if got := strings.Contains(body, "secret reorg plans"); got != c.seesSecret {
			t.Errorf("list as %v shows the now-private session: %v, want %v", c.who, got, c.seesSecret)
		}
	}
	// The pages keep no visibility cache of their own (the caller's Directory is the one
	// decision, shared with search in Slack): the two non-auditor lists ask twice per channel.
	f.vis.mu.Lock()
	for ch, n := range f.vis.calls {
		if n < 2 {
			t.Errorf("channel %s checked %d times, want every list to ask (no second cache)", ch, n)
		}
	}
	f.vis.mu.Unlock()

	secret := "/sessions/" + f.sessions["secret reorg plans"].String()
	if status, body, _ := f.get(secret, asAlice); status != http.StatusNotFound || strings.Contains(body, "reorg") {
		t.Errorf("private session as alice: %d, want 404 without content", status)
	}
	if status, body, _ := f.get(secret, asAuditor); status != http.StatusOK || !strings.Contains(body, "the reorg timeout is friday") {
		t.Errorf("private session as auditor: %d", status)
	}
	if _, body, _ := f.get("/search?q=timeout", asAlice); strings.Contains(body, "reorg") {
		t.Error("search shows a hit from a now-private channel to a non-auditor")
	}
	if _, body, _ := f.get("/search?q=timeout", asAuditor); !strings.Contains(body, "reorg") {
		t.Error("search hides a now-private channel's hit from an auditor")
	}
}

func TestTranscriptPage(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	id := f.sessions["billing-api crash loop"]
	status, body, _ := f.get("/sessions/"+id.String(), asAlice)
	if status != http.StatusOK {
		t.Fatalf("status %d", status)
	}
	order := []string{"why is billing-api failing with a timeout? 👀", "kubectl logs deploy/billing-api", "The pods cannot reach Postgres", "deploy to prod", "(edited)", "[message deleted]"}
	last := -1
	for _, s := range order {
		i := strings.Index(body, s)
		if i < 0 || i < last {
			t.Errorf("%q missing or out of order (at %d, previous at %d)", s, i, last)
		}
		last = i
	}
	for _, never := range []string{"sk-XXXX", "deploy to staging", "turn started"} {
		if strings.Contains(body, never) {
			t.Errorf("transcript shows %q", never)
		}
	}
	if _, body, _ := f.get("/sessions/"+id.String()+"?all=1", asAlice); !strings.Contains(body, "turn started") {
		t.Error("?all=1 does not show markers")
	}
	if _, body, _ := f.get("/sessions/"+id.String()+"?deleted=1", asAlice); strings.Contains(body, "sk-XXXX") {
		t.Error("a non-auditor revealed deleted text")
	}
	if _, body, _ := f.get("/sessions/"+id.String()+"?deleted=1", asAuditor); !strings.Contains(body, "sk-XXXX") {
		t.Error("an auditor cannot reveal deleted text")
	}
	for _, bad := range []string{"/sessions/not-a-uuid", "/sessions/0190f3a2-0000-7000-8000-000000000009"} {
		if status, _, _ := f.get(bad, asAlice); status != http.StatusNotFound {
			t.Errorf("%s: status %d, want 404", bad, status)
		}
	}

	status, md, hdr := f.get("/sessions/"+id.String()+"/download?format=md", asAlice)
	if status != http.StatusOK || !strings.Contains(hdr.Get("Content-Disposition"), "attachment") ||
		!strings.Contains(md, "# billing-api crash loop") || !strings.Contains(md, "deploy to prod _(edited)_") {
		t.Errorf("download md: %d %v\n%s", status, hdr, md)
	}
	if status, _, _ := f.get("/sessions/"+id.String()+"/download?format=pdf", asAlice); status != http.StatusBadRequest {
		t.Errorf("download pdf: %d, want 400", status)
	}

	log := f.accessLog()
	var views, downloads int
	for _, r := range log {
		switch {
		case r.Action == "view" && r.Status == 200 && r.Session != nil && *r.Session == id.String():
			views++
		case r.Action == "download" && r.Format == "md" && r.Who == "alice@example.com" && r.Via == "proxy_header":
			downloads++
		}
	}
	if views != 4 || downloads != 1 {
		t.Errorf("access log: %d views and %d md downloads recorded, want 4 and 1: %+v", views, downloads, log)
	}
}

func TestSearchPage(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	_, body, _ := f.get("/search?q=timeout", asToken)
	if !strings.Contains(body, "<mark>timeout</mark>") || !strings.Contains(body, "billing-api crash loop") || !strings.Contains(body, "kafka consumer lag") {
		t.Errorf("search page lacks highlighted hits:\n%s", body)
	}
	if !strings.Contains(body, "https://acme.slack.com/archives/C0000001/p1700000000001200?thread_ts=1700000000.001200&amp;cid=C0000001") {
		t.Error("search hit lacks its Slack permalink")
	}
	_, body, _ = f.get("/search?q=timeout&channel=C0000002", asToken)
	if strings.Contains(body, "billing-api crash loop") || !strings.Contains(body, "kafka consumer lag") {
		t.Error("channel filter not applied")
	}
	for q, want := range map[string]string{
		"":           "Type some words to search for.",
		"the":        "Cannot search for that: it has no searchable words",
		"zzzunknown": "Nothing matches “zzzunknown”.",
	} {
		status, body, _ := f.get("/search?q="+url.QueryEscape(q), asToken)
		if status != http.StatusOK || !strings.Contains(body, want) {
			t.Errorf("search %q: status %d, want 200 with %q", q, status, want)
		}
	}
	if _, body, _ := f.get("/search?q=timeout&since=yesterday", asToken); !strings.Contains(body, "is not a date") {
		t.Error("a bad date is not explained")
	}
	if status, body, _ := f.get("/search?q=%3Cscript%3Ealert(1)%3C/script%3E", asToken); status != 200 || strings.Contains(body, "<script>") {
		t.Error("the query is not escaped on the page")
	}
	var searches []accessRow
	for _, r := range f.accessLog() {
		if r.Action == "search" {
			searches = append(searches, r)
		}
	}
	if len(searches) != 7 || searches[0].Query != "timeout" || searches[0].Who != "ci-bot" || searches[0].Via != "bearer_token" ||
		searches[0].Results != 3 || searches[1].Query != "timeout channel:C0000002" {
		t.Errorf("search access records: %+v", searches)
	}
}

// The access log is append-only for the application role.
func TestAccessLogIsAppendOnly(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.get("/", asAlice)
	for _, sql := range []string{
		`UPDATE access_log SET who = 'mallory'`,
		`DELETE FROM access_log`,
		`TRUNCATE access_log`,
	} {
		_, err := f.app.Exec(f.ctx, sql)
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "42501" {
			t.Errorf("%s as logbook_app: %v, want insufficient_privilege", sql, err)
		}
		_, err = f.admin.Exec(f.ctx, sql) // even the owner: the trigger refuses
		if !errors.As(err, &pgErr) || pgErr.Code != "42501" {
			t.Errorf("%s as superuser: %v, want the append-only trigger's refusal", sql, err)
		}
	}
	if got := f.accessLog(); len(got) != 1 || got[0].Who != "alice@example.com" || got[0].Action != "list" || got[0].Results != 2 {
		t.Errorf("access log = %+v", got)
	}
}

// failingLog is an access log that cannot be written.
type failingLog struct{}

func (failingLog) Exec(context.Context, string, ...any) (pgconn.CommandTag, error) {
	return pgconn.CommandTag{}, errors.New("connection refused")
}

func TestNothingIsShownUnrecorded(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	h, err := web.Handler(web.Config{Sessions: f.store, Finder: f.searcher, AccessLog: failingLog{},
		Access: web.Access{ProxyHeader: proxyHeader}, Log: zerolog.New(zerolog.NewTestWriter(t))})
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"/", "/search?q=timeout", "/sessions/" + f.sessions["billing-api crash loop"].String(),
		"/sessions/" + f.sessions["billing-api crash loop"].String() + "/download?format=json"} {
		req := httptest.NewRequest(http.MethodGet, path, nil)
		req.RemoteAddr = "127.0.0.1:4180" // the proxy on the same host
		req.Header.Set(proxyHeader, "alice@example.com")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusServiceUnavailable || strings.Contains(rec.Body.String(), "billing") {
			t.Errorf("%s with a broken access log: %d, want 503 without content", path, rec.Code)
		}
	}
}

func TestUnknownVisibilityHidesFromNonAuditors(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	s, err := f.store.Open(f.ctx, session.ThreadKey{Team: "T0000001", Channel: "C0000BAD", ThreadTS: "1700000300.000100"})
	if err != nil {
		t.Fatal(err)
	}
	if status, _, _ := f.get("/sessions/"+s.ID.String(), asAlice); status != http.StatusNotFound {
		t.Errorf("session in a channel of unknown visibility: %d, want 404 for a non-auditor", status)
	}
	if status, _, _ := f.get("/sessions/"+s.ID.String(), asAuditor); status != http.StatusOK {
		t.Errorf("session in a channel of unknown visibility: %d, want 200 for an auditor", status)
	}
}

// The proxy header is believed only from a trusted proxy's address (issue 17: a forged
// X-Forwarded-Email sent straight to logbook reached the auditor-only pages). By default only
// loopback is trusted; forwarded-for headers change nothing.
func TestForgedProxyHeaderFromAnUntrustedAddressIsRefused(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	hidden := "/sessions/" + f.sessions["secret reorg plans"].String() // auditors only
	serve := func(h http.Handler, remote, path string, headers map[string]string) (int, string) {
		req := httptest.NewRequest(http.MethodGet, path, nil)
		req.RemoteAddr = remote
		for k, v := range headers {
			req.Header.Set(k, v)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec.Code, rec.Body.String()
	}
	forged := map[string]string{proxyHeader: "auditor@example.com", "X-Forwarded-For": "127.0.0.1", "X-Real-Ip": "127.0.0.1"}
	handler := func(trusted []netip.Prefix) http.Handler {
		h, err := web.Handler(web.Config{Sessions: f.store, Finder: f.searcher, AccessLog: f.app, Visibility: f.vis,
			Access: web.Access{ProxyHeader: proxyHeader, Auditors: []string{"auditor@example.com"}, TrustedProxies: trusted,
				Tokens: []web.Token{{Name: "ci-bot", Secret: tokenSecret}}},
			Log: zerolog.New(zerolog.NewTestWriter(t))})
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	def := handler(nil)
	for _, remote := range []string{"203.0.113.9:51000", "192.0.2.1:1234", "[2001:db8::1]:443", "10.0.0.5:4180"} {
		for _, path := range []string{"/", hidden, "/search?q=reorg", hidden + "/download?format=json"} {
			if code, body := serve(def, remote, path, forged); code != http.StatusUnauthorized || strings.Contains(body, "reorg") {
				t.Errorf("forged header from %s to %s: %d, want 401 without content", remote, path, code)
			}
		}
	}
	// The positive control: the same header from the proxy on loopback is believed.
	for _, remote := range []string{"127.0.0.1:4180", "[::1]:4180", "[::ffff:127.0.0.1]:4180"} {
		if code, body := serve(def, remote, hidden, forged); code != http.StatusOK || !strings.Contains(body, "reorg") {
			t.Errorf("header from the proxy at %s: %d, want 200 with the auditor's page", remote, code)
		}
	}
	// A bearer token still works from anywhere.
	if code, _ := serve(def, "203.0.113.9:51000", "/", asToken); code != http.StatusOK {
		t.Errorf("bearer token from outside: %d, want 200", code)
	}
	// Configured proxies replace the default.
	private := handler([]netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")})
	if code, _ := serve(private, "10.1.2.3:4180", hidden, forged); code != http.StatusOK {
		t.Errorf("header from a configured proxy: %d, want 200", code)
	}
	if code, _ := serve(private, "127.0.0.1:4180", hidden, forged); code != http.StatusUnauthorized {
		t.Errorf("header from loopback when only 10.0.0.0/8 is trusted: %d, want 401", code)
	}
	// The 5 requests answered 200 are recorded as views; each forged header (16 from outside,
	// 1 from loopback when only 10.0.0.0/8 is trusted) as a failed sign-in.
	var views, forgeries int
	for _, r := range f.accessLog() {
		switch {
		case r.Action == "signin" && r.Who == "anonymous" && r.Format == "proxy_header" && r.Status == http.StatusUnauthorized:
			forgeries++
		case r.Action != "signin":
			views++
		}
	}
	if views != 5 || forgeries != 17 {
		t.Errorf("access log holds %d views and %d forgeries, want 5 and 17", views, forgeries)
	}
}

func TestParseTrustedProxies(t *testing.T) {
	t.Parallel()
	got, err := web.ParseTrustedProxies(" 10.0.0.0/8, 192.0.2.7 ,::1/128,,fd00::/8")
	if err != nil || len(got) != 4 || got[1] != netip.MustParsePrefix("192.0.2.7/32") {
		t.Errorf("ParseTrustedProxies = %v, %v", got, err)
	}
	for _, bad := range []string{"10.0.0.0/33", "not-an-ip", "10.0.0/8"} {
		if _, err := web.ParseTrustedProxies(bad); err == nil {
			t.Errorf("ParseTrustedProxies(%q): no error", bad)
		}
	}
}

// With a proxy secret, the identity header is believed only when the proxy's secret comes
// with it: a loopback caller that is not the proxy (a sandboxed command on the host's network)
// cannot name itself an auditor (issue 27). Real HTTP over loopback.
func TestProxyHeaderWithoutTheProxySecretIsRefused(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	const secret = "proxy-secret-0123456789"
	h, err := web.Handler(web.Config{Sessions: f.store, Finder: f.searcher, AccessLog: f.app, Visibility: f.vis,
		Access: web.Access{ProxyHeader: proxyHeader, ProxySecret: secret, Auditors: []string{"auditor@example.com"}},
		Log:    zerolog.New(zerolog.NewTestWriter(t))})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h) // 127.0.0.1: a trusted address by default
	t.Cleanup(srv.Close)
	hidden := "/sessions/" + f.sessions["secret reorg plans"].String() // auditors only
	get := func(headers map[string]string) (int, string) {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+hidden, nil)
		for k, v := range headers {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, forged := range []map[string]string{
		{proxyHeader: "auditor@example.com"},
		{proxyHeader: "auditor@example.com", web.ProxySecretHeader: "guess-0123456789abcd"},
		{proxyHeader: "auditor@example.com", web.ProxySecretHeader: secret[:len(secret)-1]},
		{proxyHeader: "auditor@example.com", web.ProxySecretHeader: ""},
	} {
		if code, body := get(forged); code != http.StatusUnauthorized || strings.Contains(body, "reorg") {
			t.Errorf("header with %q from loopback: %d, want 401 without content", forged[web.ProxySecretHeader], code)
		}
	}
	if code, body := get(map[string]string{proxyHeader: "auditor@example.com", web.ProxySecretHeader: secret}); code != http.StatusOK ||
		!strings.Contains(body, "the reorg timeout is friday") {
		t.Errorf("header with the proxy's secret: %d, want 200 with the auditor's page", code)
	}
	var views, forgeries int
	for _, r := range f.accessLog() {
		switch {
		case r.Action == "view" && r.Who == "auditor@example.com" && r.Auditor:
			views++
		case r.Action == "signin" && r.Who == "anonymous" && r.Format == "proxy_header":
			forgeries++
		default:
			t.Errorf("unexpected access record %+v", r)
		}
	}
	if views != 1 || forgeries != 4 {
		t.Errorf("access log: %d views by the auditor and %d forgeries, want 1 and 4", views, forgeries)
	}
	for _, bad := range []web.Access{{ProxyHeader: proxyHeader, ProxySecret: "short"}, {ProxySecret: secret, Tokens: []web.Token{{Name: "x", Secret: tokenSecret}}}} {
		if _, err := web.Handler(web.Config{Sessions: f.store, Finder: f.searcher, AccessLog: f.app, Access: bad}); err == nil {
			t.Errorf("Handler accepted %+v", bad)
		}
	}
}

// The pages ask the caller's visibility on every request — the one decision search in Slack
// uses, which follows privacy events — and keep no cache of their own: a channel made private
// between two requests is hidden at the second, its page answers 404 and search drops it.
func TestAChannelMadePrivateIsHiddenAtTheNextRequest(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	kafka := "/sessions/" + f.sessions["kafka consumer lag"].String()
	if _, body, _ := f.get("/", asAlice); !strings.Contains(body, "kafka consumer lag") {
		t.Fatal("the public session is not listed")
	}
	if status, _, _ := f.get(kafka, asAlice); status != http.StatusOK {
		t.Fatalf("the public session's page: %d", status)
	}
	f.vis.mu.Lock()
	f.vis.private["C0000002"] = true
	f.vis.mu.Unlock()
	if _, body, _ := f.get("/", asAlice); strings.Contains(body, "kafka consumer lag") {
		t.Error("the list still shows a session of a channel made private")
	}
	if status, body, _ := f.get(kafka, asAlice); status != http.StatusNotFound || strings.Contains(body, "kafka") {
		t.Errorf("the page of a session of a channel made private: %d, want 404", status)
	}
	if _, body, _ := f.get("/search?q=lag", asAlice); strings.Contains(body, "kafka consumer lag") {
		t.Error("search still shows a session of a channel made private")
	}
}

// The search page asks for one hit more than it shows (not twice as many: #53). When hits in
// a private channel are hidden from a viewer and the page came back full, it asks again with
// room, so the viewer still sees a full page of what they may see; an auditor sees the
// private hits among them.
func TestSearchPageFillsAroundHiddenHits(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	for i := range 30 {
		channel := "C0000001"
		if i >= 25 { // the five newest are in the private channel
			channel = "C0000003"
		}
		ts := fmt.Sprintf("1700001%03d.000100", i)
		s, err := f.store.Open(f.ctx, session.ThreadKey{Team: "T0000001", Channel: channel, ThreadTS: ts})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.store.Append(f.ctx, s.ID, session.NewEvent{Type: session.TypeUserMessage, Actor: alice,
			IdempotencyKey: "m:" + ts, Payload: session.UserMessage{Team: "T0000001", Channel: channel, ThreadTS: ts,
				TS: ts, User: "U0000001", UserName: "alice", Text: fmt.Sprintf("quota exceeded on run %d in %s", i, channel)}}); err != nil {
			t.Fatal(err)
		}
	}
	ix := search.NewIndexer(f.store, f.app, zerolog.New(zerolog.NewTestWriter(t)), search.IndexerOptions{})
	if err := ix.Sync(f.ctx); err != nil {
		t.Fatal(err)
	}
	hits := func(body string) int { return strings.Count(body, `<li class="hit"`) }
	f.queries.take()
	_, body, _ := f.get("/search?q=quota&kind=messages", asAlice)
	if got := f.queries.take(); !slices.Equal(got, []int{search.DefaultLimit + 1, 2 * search.DefaultLimit}) {
		t.Errorf("alice's page asked for %v hits, want %d, then %d once hits were hidden", got, search.DefaultLimit+1, 2*search.DefaultLimit)
	}
	if n := hits(body); n != search.DefaultLimit {
		t.Errorf("alice sees %d hits, want a full page of %d (25 public matches, 5 newer private ones hidden)", n, search.DefaultLimit)
	}
	if strings.Contains(body, "C0000003") {
		t.Error("alice sees a hit from the private channel")
	}
	_, body, _ = f.get("/search?q=quota&kind=messages", asAuditor)
	if got := f.queries.take(); !slices.Equal(got, []int{search.DefaultLimit + 1}) {
		t.Errorf("the auditor's page asked for %v hits, want %d once (nothing hidden)", got, search.DefaultLimit+1)
	}
	if n := hits(body); n != search.DefaultLimit {
		t.Errorf("the auditor sees %d hits, want %d", n, search.DefaultLimit)
	}
	if !strings.Contains(body, "in C0000003") {
		t.Error("the auditor does not see the private channel's hits")
	}
}
