package search_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"
	"go.uber.org/goleak"

	"github.com/logbook/logbook/migrations/pgtest"
	"github.com/logbook/logbook/session"
	"github.com/logbook/logbook/session/search"
)

type fixture struct {
	t     *testing.T
	ctx   context.Context
	store *session.Store
	admin *pgxpool.Pool // superuser, for what the app may not do (holding raw transactions, aging rows)
	pool  *pgxpool.Pool // logbook_app
	ix    *search.Indexer
	s     *search.Searcher
}

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func newFixture(t *testing.T, opts search.Options) *fixture {
	t.Helper()
	ctx := context.Background()
	dbURL := pgtest.New(t)
	pool, err := session.Connect(ctx, dbURL, session.PoolOptions{Role: "logbook_app"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	admin, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(admin.Close)
	store := session.NewStore(pool, session.Options{})
	if opts.WorkspaceDomain == "" {
		opts.WorkspaceDomain = "acme.slack.com"
	}
	return &fixture{
		t: t, ctx: ctx, store: store, admin: admin, pool: pool,
		ix: search.NewIndexer(store, pool, zerolog.New(zerolog.NewTestWriter(t)), search.IndexerOptions{Batch: 7}),
		s:  search.NewSearcher(pool, opts),
	}
}

func (f *fixture) open(channel, threadTS string) session.Session {
	f.t.Helper()
	s, err := f.store.Open(f.ctx, session.ThreadKey{Team: "T0000001", Channel: channel, ThreadTS: threadTS})
	if err != nil {
		f.t.Fatal(err)
	}
	return s
}

func (f *fixture) append(s session.Session, evs ...session.NewEvent) []session.Event {
	f.t.Helper()
	out, err := f.store.Append(f.ctx, s.ID, evs...)
	if err != nil {
		f.t.Fatal(err)
	}
	return out
}

func (f *fixture) catchUp() {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(f.ctx, time.Minute)
	defer cancel()
	if err := f.ix.Sync(ctx); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) search(q search.Query) []search.Hit {
	f.t.Helper()
	hits, err := f.s.Search(f.ctx, q)
	if err != nil {
		f.t.Fatalf("search %+v: %v", q, err)
	}
	return hits
}

func userMsg(s session.Session, user, name, ts, text string) session.NewEvent {
	return session.NewEvent{
		Type:  session.TypeUserMessage,
		Actor: session.Actor{Kind: session.ActorUser, ID: user},
		Payload: session.UserMessage{Team: s.Key.Team, Channel: s.Key.Channel, ThreadTS: s.Key.ThreadTS,
			TS: ts, User: user, UserName: name, Text: text},
		IdempotencyKey: "msg:" + ts,
	}
}

func botMsg(text string) session.NewEvent {
	return session.NewEvent{Type: session.TypeAssistantMessage, Actor: session.Actor{Kind: session.ActorBot, ID: "UB000001"},
		Payload: session.AssistantMessage{Text: text}}
}

// texts returns the snippets of hits as plain text, in order.
func texts(hits []search.Hit) []string {
	out := make([]string, len(hits))
	for i, h := range hits {
		out[i] = h.SnippetText("", "")
	}
	return out
}

func TestSearchFindsMessagesWithHighlightAndPermalink(t *testing.T) {
	t.Parallel()
	f := newFixture(t, search.Options{})
	s := f.open("C0000001", "1700000000.001200")
	f.append(s,
		userMsg(s, "U0000001", "alice", "1700000000.001200", "the deploy of billing-api failed with a timeout"),
		botMsg("I rolled back billing-api; the timeout came from the database pool."),
	)
	delivered := session.NewEvent{Type: session.TypeDelivered, Actor: session.Actor{Kind: session.ActorSystem, ID: "delivery"},
		Payload: session.Delivered{Seq: 2, Channel: "C0000001", TS: []string{"1700000000.001300"}}}
	f.append(s, delivered, session.NewEvent{Type: session.TypeTitle, Actor: session.Actor{Kind: session.ActorBot, ID: "UB000001"},
		Payload: session.Title{Text: "billing-api deploy timeout"}})
	f.catchUp()

	hits := f.search(search.Query{Text: "timeout"})
	if len(hits) != 2 {
		t.Fatalf("hits = %d (%q), want 2", len(hits), texts(hits))
	}
	for _, h := range hits {
		if h.SessionID != s.ID || h.Title != "billing-api deploy timeout" {
			t.Errorf("hit %+v: want session %s with its title", h, s.ID)
		}
		var marked []string
		for _, sp := range h.Snippet {
			if sp.Match {
				marked = append(marked, sp.Text)
			}
		}
		if !slices.Equal(marked, []string{"timeout"}) {
			t.Errorf("highlighted %q in %q, want [timeout]", marked, h.SnippetText("[", "]"))
		}
	}
	byKind := map[string]search.Hit{}
	for _, h := range hits {
		byKind[h.Kind] = h
	}
	if got, want := byKind["user"].Permalink, "https://acme.slack.com/archives/C0000001/p1700000000001200?thread_ts=1700000000.001200&cid=C0000001"; got != want {
		t.Errorf("user permalink = %s, want %s", got, want)
	}
	if got, want := byKind["assistant"].Permalink, "https://acme.slack.com/archives/C0000001/p1700000000001300?thread_ts=1700000000.001200&cid=C0000001"; got != want {
		t.Errorf("assistant permalink (from delivered) = %s, want %s", got, want)
	}
	if byKind["user"].ActorName != "alice" || byKind["assistant"].ActorKind != "bot" {
		t.Errorf("actors: %+v / %+v", byKind["user"], byKind["assistant"])
	}
}

// An edit replaces the searchable text; a deletion removes it.
func TestSearchFollowsEditsAndDeletions(t *testing.T) {
	t.Parallel()
	f := newFixture(t, search.Options{})
	s := f.open("C0000001", "1700000000.001200")
	f.append(s,
		userMsg(s, "U0000001", "alice", "1700000000.001500", "deploy to staging"),
		userMsg(s, "U0000001", "alice", "1700000000.001600", "token is sk-XXXX"),
	)
	f.catchUp()
	if hits := f.search(search.Query{Text: "sk-XXXX"}); len(hits) != 1 {
		t.Fatalf("before deletion: %d hits for sk-XXXX, want 1", len(hits))
	}
	f.append(s,
		session.NewEvent{Type: session.TypeUserMessageEdited, Actor: session.Actor{Kind: session.ActorUser, ID: "U0000001"},
			Payload: session.UserMessageEdited{OrigTS: "1700000000.001500", EditTS: "1700000100.000000", User: "U0000001", Text: "deploy to prod"}},
		session.NewEvent{Type: session.TypeUserMessageDeleted, Actor: session.Actor{Kind: session.ActorUser, ID: "U0000001"},
			Payload: session.UserMessageDeleted{DeletedTS: "1700000000.001600", User: "U0000001"}},
	)
	f.catchUp()
	for _, q := range []string{"sk-XXXX", "token", "staging"} {
		if hits := f.search(search.Query{Text: q}); len(hits) != 0 {
			t.Errorf("after edit and deletion, %q still finds %q", q, texts(hits))
		}
	}
	hits := f.search(search.Query{Text: "prod"})
	if len(hits) != 1 || !hits[0].Edited || hits[0].SnippetText("", "") != "deploy to prod" {
		t.Fatalf("prod: %+v, want the edited message", hits)
	}
	sum, err := f.s.Summary(f.ctx, s.ID)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(sum.FirstText, "sk-") || sum.FirstText != "deploy to prod" {
		t.Errorf("session first text = %q, want the edited first message", sum.FirstText)
	}
}

// Within one indexing step: the fold applies the edit and the deletion before
// the messages are written, so the deleted text is never indexed at all.
func TestSearchFollowsEditsAndDeletionsInOneStep(t *testing.T) {
	t.Parallel()
	f := newFixture(t, search.Options{})
	s := f.open("C0000001", "1700000000.001200")
	user := session.Actor{Kind: session.ActorUser, ID: "U0000001"}
	f.append(s,
		userMsg(s, "U0000001", "alice", "1700000000.001500", "deploy to staging"),
		userMsg(s, "U0000001", "alice", "1700000000.001600", "token is sk-XXXX"),
		session.NewEvent{Type: session.TypeUserMessageEdited, Actor: user,
			Payload: session.UserMessageEdited{OrigTS: "1700000000.001500", User: "U0000001", Text: "deploy to prod"}},
		session.NewEvent{Type: session.TypeUserMessageDeleted, Actor: user,
			Payload: session.UserMessageDeleted{DeletedTS: "1700000000.001600", User: "U0000001"}},
	)
	f.catchUp()
	for _, q := range []string{"sk-XXXX", "token", "staging"} {
		if hits := f.search(search.Query{Text: q}); len(hits) != 0 {
			t.Errorf("%q finds %q", q, texts(hits))
		}
	}
	if hits := f.search(search.Query{Text: "prod"}); len(hits) != 1 || !hits[0].Edited {
		t.Fatalf("prod: %+v, want the edited message", hits)
	}
	var deleted bool
	if err := f.admin.QueryRow(f.ctx, `SELECT deleted FROM search_docs WHERE session_id = $1 AND ts = '1700000000.001600'`, s.ID).Scan(&deleted); err != nil || !deleted {
		t.Fatalf("deleted doc: deleted = %v, %v", deleted, err)
	}
}

// An event whose transaction commits after later ones is still indexed.
func TestIndexerNeverSkipsALateCommit(t *testing.T) {
	t.Parallel()
	f := newFixture(t, search.Options{})
	held := f.open("C0000001", "1700000000.000100")
	others := f.open("C0000001", "1700000000.000200")
	f.append(others, userMsg(others, "U0000001", "alice", "1700000000.000201", "first committed"))

	tx, err := f.admin.Begin(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(f.ctx) //nolint:errcheck
	payload, _ := json.Marshal(session.UserMessage{Channel: "C0000001", ThreadTS: "1700000000.000100", TS: "1700000000.000101", User: "U0000002", Text: "held transaction message"})
	if _, err := tx.Exec(f.ctx, `SELECT * FROM logbook_append($1, NULL, NULL, ARRAY[$2::uuid], ARRAY['user_message'],
		ARRAY['user'], ARRAY['U0000002'], ARRAY[$3::jsonb], ARRAY[NULL::text], ARRAY[false])`, held.ID, uuid.Must(uuid.NewV7()), string(payload)); err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		f.append(others, userMsg(others, "U0000001", "alice", fmt.Sprintf("1700000001.%06d", i), fmt.Sprintf("later message %d", i)))
	}
	if _, err := f.ix.CatchUp(f.ctx); err != nil { // indexes what is readable, not the held event
		t.Fatal(err)
	}
	if hits := f.search(search.Query{Text: "held"}); len(hits) != 0 {
		t.Fatalf("the held transaction is visible before it commits: %q", texts(hits))
	}
	if err := tx.Commit(f.ctx); err != nil {
		t.Fatal(err)
	}
	f.catchUp()

	want := f.keys(`SELECT session_id::text || '/' || seq FROM events WHERE type IN ('user_message', 'assistant_message') ORDER BY 1`)
	got := f.keys(`SELECT session_id::text || '/' || seq FROM search_docs ORDER BY 1`)
	if !slices.Equal(got, want) || len(want) != 12 {
		t.Fatalf("indexed %v, want the table's %v (12 messages)", got, want)
	}
	if hits := f.search(search.Query{Text: "held"}); len(hits) != 1 {
		t.Fatalf("held message: %d hits, want 1", len(hits))
	}
}

func (f *fixture) keys(sql string) []string {
	f.t.Helper()
	rows, err := f.admin.Query(f.ctx, sql)
	if err != nil {
		f.t.Fatal(err)
	}
	var out []string
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			f.t.Fatal(err)
		}
		out = append(out, k)
	}
	if err := rows.Err(); err != nil {
		f.t.Fatal(err)
	}
	return out
}

func TestSearchRanksRelevanceAndRecency(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
	f := newFixture(t, search.Options{Now: func() time.Time { return now }})
	s := f.open("C0000001", "1700000000.001200")
	f.append(s,
		userMsg(s, "U0000001", "alice", "1700000000.000001", "postgres vacuum notes: the vacuum stalled, vacuum again after the vacuum freeze"), // old, very relevant
		userMsg(s, "U0000001", "alice", "1700000000.000002", "lunch plans and a vacuum cleaner"),                                                // new, barely relevant
		userMsg(s, "U0000001", "alice", "1700000000.000003", "vacuum of the orders table"),                                                      // old twin
		userMsg(s, "U0000001", "alice", "1700000000.000004", "vacuum of the orders table"),                                                      // new twin
	)
	f.catchUp()
	age := func(ts string, d time.Duration) {
		if _, err := f.admin.Exec(f.ctx, `UPDATE search_docs SET created_at = $1 WHERE ts = $2`, now.Add(-d), ts); err != nil {
			t.Fatal(err)
		}
	}
	age("1700000000.000001", 200*24*time.Hour)
	age("1700000000.000002", time.Hour)
	age("1700000000.000003", 90*24*time.Hour)
	age("1700000000.000004", 2*time.Hour)

	hits := f.search(search.Query{Text: "vacuum"})
	order := make([]string, len(hits))
	for i, h := range hits {
		order[i] = h.TS[len(h.TS)-1:]
	}
	if got := strings.Join(order, ""); got[0] != '1' {
		t.Errorf("order %s: the much more relevant old message should rank first", got)
	}
	if i3, i4 := strings.IndexByte(strings.Join(order, ""), '3'), strings.IndexByte(strings.Join(order, ""), '4'); i4 > i3 {
		t.Errorf("order %v: of two equally relevant messages the newer should rank first", order)
	}
	for i := 1; i < len(hits); i++ {
		if hits[i].Score > hits[i-1].Score {
			t.Errorf("scores not descending: %v then %v", hits[i-1].Score, hits[i].Score)
		}
	}
}

func TestSearchFilters(t *testing.T) {
	t.Parallel()
	f := newFixture(t, search.Options{})
	a := f.open("C0000001", "1700000000.000100")
	b := f.open("C0000002", "1700000000.000200")
	f.append(a,
		userMsg(a, "U0000001", "Alice", "1700000000.000101", "the cache is cold"),
		botMsg("warming the cache now"),
		session.NewEvent{Type: session.TypeToolCall, Actor: session.Actor{Kind: session.ActorBot, ID: "UB000001"},
			Payload: session.ToolCall{CallID: "c1", Name: "shell", Input: json.RawMessage(`{"cmd":"redis-cli info cache"}`)}},
		session.NewEvent{Type: session.TypeToolResult, Actor: session.Actor{Kind: session.ActorSandbox, ID: "bwrap"},
			Payload: session.ToolResult{CallID: "c1", Content: "cache hits: 0"}},
	)
	f.append(b, userMsg(b, "U0000002", "bob", "1700000000.000201", "cache eviction policy"))
	f.catchUp()

	var mid time.Time
	if err := f.admin.QueryRow(f.ctx, `SELECT created_at FROM search_docs WHERE session_id = $1 ORDER BY seq LIMIT 1`, b.ID).Scan(&mid); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		q    search.Query
		want int
	}{
		{"all conversation", search.Query{Text: "cache"}, 3},
		{"with tools", search.Query{Text: "cache", Tools: true}, 5},
		{"actor id", search.Query{Text: "cache", Actor: "U0000002"}, 1},
		{"actor name any case", search.Query{Text: "cache", Actor: "@alice"}, 1},
		{"actor bot", search.Query{Text: "cache", Actor: "bot"}, 1},
		{"channel", search.Query{Text: "cache", Channel: "#C0000001"}, 2},
		{"session", search.Query{Text: "cache", Session: b.ID}, 1},
		{"since", search.Query{Text: "cache", Since: mid}, 1},
		{"until", search.Query{Text: "cache", Until: mid}, 2},
		{"unknown channel", search.Query{Text: "cache", Channel: "C9999999"}, 0},
	}
	for _, c := range cases {
		if got := f.search(c.q); len(got) != c.want {
			t.Errorf("%s: %d hits %q, want %d", c.name, len(got), texts(got), c.want)
		}
	}
}

func TestSearchPhrasesExclusionAndOr(t *testing.T) {
	t.Parallel()
	f := newFixture(t, search.Options{})
	s := f.open("C0000001", "1700000000.000100")
	f.append(s,
		userMsg(s, "U0000001", "alice", "1700000000.000101", "the rollback failed on node 3"),
		userMsg(s, "U0000001", "alice", "1700000000.000102", "node 3 failed; rollback started"),
		userMsg(s, "U0000001", "alice", "1700000000.000103", "kafka consumer lag"),
	)
	f.catchUp()
	cases := []struct {
		q    string
		want []string
	}{
		{`"rollback failed"`, []string{"the rollback failed on node 3"}},
		{`rollback -started`, []string{"the rollback failed on node 3"}},
		{`kafka OR started`, []string{"kafka consumer lag", "node 3 failed; rollback started"}},
		{`rolled back`, nil}, // stems: "rolled" is not "rollback"
		{`failing`, []string{"node 3 failed; rollback started", "the rollback failed on node 3"}}, // stemmed
	}
	for _, c := range cases {
		got := texts(f.search(search.Query{Text: c.q}))
		slices.Sort(got)
		slices.Sort(c.want)
		if !slices.Equal(got, c.want) {
			t.Errorf("%s: got %q, want %q", c.q, got, c.want)
		}
	}
}

func TestSearchRejectsBadQueries(t *testing.T) {
	t.Parallel()
	f := newFixture(t, search.Options{})
	now := time.Now()
	cases := []struct {
		q    search.Query
		want error
	}{
		{search.Query{Text: ""}, search.ErrEmptyQuery},
		{search.Query{Text: "   \t"}, search.ErrEmptyQuery},
		{search.Query{Text: "the and of"}, search.ErrInvalidQuery},
		{search.Query{Text: `- " ! ( )`}, search.ErrInvalidQuery},
		{search.Query{Text: strings.Repeat("word ", 300)}, search.ErrInvalidQuery},
		{search.Query{Text: "ok\x00"}, search.ErrInvalidQuery},
		{search.Query{Text: "ok", Limit: 1000}, search.ErrInvalidQuery},
		{search.Query{Text: "ok", Since: now, Until: now.Add(-time.Hour)}, search.ErrInvalidQuery},
	}
	for _, c := range cases {
		hits, err := f.s.Search(f.ctx, c.q)
		if !errors.Is(err, c.want) {
			t.Errorf("%q: err = %v, want %v", c.q.Text, err, c.want)
		}
		var qe *search.QueryError
		if errors.As(err, &qe) && qe.Reason == "" {
			t.Errorf("%q: query error without a reason", c.q.Text)
		}
		if hits != nil {
			t.Errorf("%q: hits %v with an error", c.q.Text, hits)
		}
	}
	// A valid query that matches nothing is not an error.
	hits, err := f.s.Search(f.ctx, search.Query{Text: "nothing-here"})
	if err != nil || hits == nil || len(hits) != 0 {
		t.Errorf("no match: hits %v, err %v; want an empty list", hits, err)
	}
}

// Every plan (a short walk for common terms, a longer walk for medium ones, the GIN index for
// rare ones) returns the most recent matches; a tiny window and candidate count force each
// path on a small data set.
func TestSearchPlansAgreeOnCommonMediumAndRareTerms(t *testing.T) {
	t.Parallel()
	f := newFixture(t, search.Options{Window: 10, Candidates: 3, MaxWalk: 100})
	s := f.open("C0000001", "1700000000.000100")
	var evs []session.NewEvent
	for i := range 60 {
		text := fmt.Sprintf("common word number %d", i)
		if i%5 == 0 {
			text += " medium"
		}
		if i == 2 || i == 5 {
			text += " with a rare zeppelin"
		}
		evs = append(evs, userMsg(s, "U0000001", "alice", fmt.Sprintf("1700000000.%06d", 200+i), text))
	}
	f.append(s, evs...)
	// Tool output (not searched by default) makes the GIN plan look costly for a medium term,
	// so that term takes the longer walk.
	var tools []session.NewEvent
	for i := range 400 {
		tools = append(tools, session.NewEvent{Type: session.TypeToolResult, Actor: session.Actor{Kind: session.ActorSandbox, ID: "bwrap"},
			Payload: session.ToolResult{CallID: fmt.Sprint("c", i), Content: "medium output"}})
	}
	f.append(s, tools...)
	f.catchUp()
	if _, err := f.admin.Exec(f.ctx, "ANALYZE search_docs"); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		q    string
		want []string
	}{
		{"common", []string{"1700000000.000257", "1700000000.000258", "1700000000.000259"}}, // 3 in the newest 10
		{"medium", []string{"1700000000.000245", "1700000000.000250", "1700000000.000255"}}, // 2 in the newest 10: walk on
		{"zeppelin", []string{"1700000000.000202", "1700000000.000205"}},                    // none: GIN
		{`"common word" medium`, []string{"1700000000.000245", "1700000000.000250", "1700000000.000255"}},
	} {
		var got []string
		for _, h := range f.search(search.Query{Text: c.q, Limit: 3}) {
			got = append(got, h.TS)
		}
		slices.Sort(got)
		if !slices.Equal(got, c.want) {
			t.Errorf("%s: %v, want the newest matches %v", c.q, got, c.want)
		}
	}
}

func TestSessionsRecentAndByThread(t *testing.T) {
	t.Parallel()
	f := newFixture(t, search.Options{})
	a := f.open("C0000001", "1700000000.000100")
	b := f.open("C0000002", "1700000000.000200")
	f.append(a, userMsg(a, "U0000001", "alice", "1700000000.000100", "first session"))
	f.append(b, userMsg(b, "U0000001", "alice", "1700000000.000200", "second session"))
	f.append(a, userMsg(a, "U0000001", "alice", "1700000000.000300", "a reply in the first"))
	f.catchUp()
	rec, err := f.s.Recent(f.ctx, time.Time{}, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(rec) != 2 || rec[0].SessionID != a.ID || rec[0].Messages != 2 || rec[0].Heading() != "first session" {
		t.Fatalf("recent = %+v, want session a (2 messages) first", rec)
	}
	for _, ts := range []string{"1700000000.000100", "1700000000.000300"} {
		id, err := f.s.SessionByThread(f.ctx, "C0000001", ts)
		if err != nil || id != a.ID {
			t.Errorf("by thread %s: %v, %v; want %s", ts, id, err, a.ID)
		}
	}
	if _, err := f.s.SessionByThread(f.ctx, "C0000001", "1.2"); !errors.Is(err, session.ErrNotFound) {
		t.Errorf("unknown thread: %v, want ErrNotFound", err)
	}
}

// Search indexes and shows the readable text, not Slack's escaped form.
func TestSearchUsesDecodedText(t *testing.T) {
	t.Parallel()
	f := newFixture(t, search.Options{})
	s := f.open("C0000001", "1700000000.000100")
	m := userMsg(s, "U0000001", "alice", "1700000000.000101", "escaping a & b <tag>")
	p := m.Payload.(session.UserMessage)
	p.Raw = "escaping a &amp; b &lt;tag&gt;"
	m.Payload = p
	f.append(s, m)
	f.catchUp()
	hits := f.search(search.Query{Text: "escaping"})
	if len(hits) != 1 || hits[0].SnippetText("[", "]") != "[escaping] a & b <tag>" {
		t.Fatalf("hits %q, want the decoded text with the match marked", texts(hits))
	}
	if hits := f.search(search.Query{Text: "amp"}); len(hits) != 0 {
		t.Errorf("the escaped form is indexed: %q", texts(hits))
	}
}

// One unreadable event is logged and skipped; the events after it are indexed.
func TestIndexerSkipsUnreadablePayloads(t *testing.T) {
	t.Parallel()
	f := newFixture(t, search.Options{})
	s := f.open("C0000001", "1700000000.000100")
	f.append(s,
		session.NewEvent{Type: session.TypeUserMessage, Actor: session.Actor{Kind: session.ActorUser, ID: "U0000001"},
			Payload: json.RawMessage(`{"text": 5, "ts": ["not", "a", "string"]}`)},
		userMsg(s, "U0000001", "alice", "1700000000.000102", "following the broken one"),
		session.NewEvent{Type: session.TypeToolResult, Actor: session.Actor{Kind: session.ActorSandbox, ID: "bwrap"},
			Payload: session.ToolResult{CallID: "c1", Content: strings.Repeat("huge output ", search.MaxBody/6)}},
	)
	f.catchUp()
	if hits := f.search(search.Query{Text: "following"}); len(hits) != 1 {
		t.Fatalf("the message after an unreadable one: %d hits, want 1", len(hits))
	}
	var n int
	if err := f.admin.QueryRow(f.ctx, `SELECT octet_length(body) FROM search_docs WHERE kind = 'tool'`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n > search.MaxBody {
		t.Errorf("tool output indexed with %d bytes, want at most %d", n, search.MaxBody)
	}
}

// Run keeps the index current until its context ends, then returns.
func TestIndexerRun(t *testing.T) {
	t.Parallel()
	f := newFixture(t, search.Options{})
	pool, err := session.Connect(f.ctx, f.admin.Config().ConnString(), session.PoolOptions{Role: "logbook_app"})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	ix := search.NewIndexer(f.store, pool, zerolog.New(zerolog.NewTestWriter(t)), search.IndexerOptions{Poll: 10 * time.Millisecond})
	ctx, cancel := context.WithCancel(f.ctx)
	done := make(chan error, 1)
	go func() { done <- ix.Run(ctx) }()

	s := f.open("C0000001", "1700000000.000100")
	f.append(s, userMsg(s, "U0000001", "alice", "1700000000.000101", "indexed in the background"))
	deadline := time.Now().Add(time.Minute)
	for len(f.search(search.Query{Text: "background"})) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("Run did not index the new message within a minute")
		}
		runtime.Gosched()
		time.Sleep(5 * time.Millisecond) // polling for a condition, not timing the code
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run returned %v, want nil after cancellation", err)
	}
}

// A channel's ledger (issue 49) is no thread: the indexer lists it nowhere, so the recent
// sessions (the web's list) show only threads, and a thread beside it still is indexed.
func TestALedgerIsNoSearchSession(t *testing.T) {
	t.Parallel()
	f := newFixture(t, search.Options{})
	s := f.open("C0000001", "1700000000.000100")
	f.append(s, userMsg(s, "U0000001", "ada", "1700000000.000100", "deploy the docs"))
	if _, err := f.store.SetChannelSetting(f.ctx, session.ChannelSetting{Team: "T0000001", Channel: "C0000001", Name: "instructions",
		New: "deploy carefully", Set: true, SetBy: "U0000001"}); err != nil {
		f.t.Fatal(err)
	}
	f.catchUp()
	got, err := f.s.Recent(f.ctx, time.Time{}, 10)
	if err != nil || len(got) != 1 || got[0].ThreadTS != "1700000000.000100" {
		t.Fatalf("recent sessions %+v, %v; want the thread alone", got, err)
	}
}

// An eval record (issue 50: a session of kind replay) is no thread either: its replayed turn's
// words are neither listed nor searched, beside a thread that is.
func TestAnEvalRecordIsNoSearchSession(t *testing.T) {
	t.Parallel()
	f := newFixture(t, search.Options{})
	s := f.open("C0000001", "1700000000.000100")
	f.append(s, userMsg(s, "U0000001", "ada", "1700000000.000100", "deploy the docs"))
	rec, err := f.store.OpenReplay(f.ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.store.Append(f.ctx, rec.ID, session.NewEvent{Type: session.TypeAssistantMessage, Actor: session.Actor{Kind: session.ActorBot, ID: "UB000001"},
		Payload: session.AssistantMessage{Text: "a replayed answer about zeppelins", Turn: 2}}); err != nil {
		t.Fatal(err)
	}
	f.catchUp()
	got, err := f.s.Recent(f.ctx, time.Time{}, 10)
	if err != nil || len(got) != 1 || got[0].ThreadTS != "1700000000.000100" {
		t.Fatalf("recent sessions %+v, %v; want the thread alone", got, err)
	}
	page, err := f.s.SearchPage(f.ctx, search.Query{Text: "zeppelins"})
	if err != nil || len(page.Hits) != 0 {
		t.Fatalf("search for the eval record's words: %+v, %v", page.Hits, err)
	}
}
