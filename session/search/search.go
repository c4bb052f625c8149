package search

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/logbook/logbook/session"
)

// Limits of a Query.
const (
	DefaultLimit = 20
	MaxLimit     = 200
	MaxQueryLen  = 1000 // bytes of query text
)

// Query is one search. Text is websearch syntax: words, "quoted phrases", -excluded, OR.
type Query struct {
	Text string
	// Actor keeps hits by one person: a Slack user id (U0000001), a display name as captured
	// when the message was stored (case-insensitive), or "bot" for logbook's own messages.
	Actor   string
	Channel string     // a Slack channel id (C0000001); a leading '#' is ignored
	Session session.ID // the zero ID: every session
	Since   time.Time  // inclusive; zero: no lower bound
	Until   time.Time  // exclusive; zero: no upper bound
	Limit   int        // default DefaultLimit, at most MaxLimit
	// Tools includes tool calls and tool output; by default only user and assistant
	// messages are searched.
	Tools bool
	// Kind is what is searched: KindMessages (or ""), the sessions' messages; KindNotes, the
	// channels' memory notes; KindAll, both, ranked together.
	Kind string
	// After continues a search: Page.More of the page before, with the same query. Such a
	// page holds the Limit most recent matching messages older than that page's, ranked;
	// memory notes are all ranked on the first page (KindAll goes on with messages only).
	After string
}

// Page is the answer to a query: its hits, best first, and More when the search stopped
// before it had looked at every message.
//
// A first page (Query.After empty) that is not cut holds the best Limit of the most recent
// matches (see Searcher.Search) and no More. A search is cut when a common-word phrase is
// rarer than its words: walking the newest messages for it is still far cheaper than reading
// every message that holds its words through the index, but the walk reached MaxWalk rows
// first. That page holds the matches the walk found (the Limit most recent of them, ranked)
// and More; following More returns every other match once, newest first, page by page.
type Page struct {
	Hits []Hit `json:"hits"`
	// More continues the search past this page (as Query.After); empty when nothing is left.
	More string `json:"more,omitempty"`
}

// Span is a piece of a snippet; Match marks the words that matched the query.
type Span struct {
	Text  string `json:"text"`
	Match bool   `json:"match,omitempty"`
}

// Hit is one matching message.
type Hit struct {
	SessionID session.ID `json:"session_id"`
	Seq       int64      `json:"seq"`
	Kind      string     `json:"kind"` // "user", "assistant", "tool", or "note" (HitNote)
	Channel   string     `json:"channel"`
	ThreadTS  string     `json:"thread_ts"`
	TS        string     `json:"ts,omitempty"` // the message's Slack ts, when known
	ActorKind string     `json:"actor_kind"`
	ActorID   string     `json:"actor_id"`
	ActorName string     `json:"actor_name,omitempty"`
	CreatedAt time.Time  `json:"created_at"`
	Edited    bool       `json:"edited,omitempty"`
	Title     string     `json:"title,omitempty"` // the session's title, when it has one
	Score     float64    `json:"score"`           // relevance blended with recency; higher is better
	Snippet   []Span     `json:"snippet"`
	Permalink string     `json:"permalink,omitempty"` // empty without a workspace domain
	// NoteID is a channel memory note's id (Kind "note"); its SessionID is the session the
	// agent wrote it from (zero for a person's /logbook remember), Seq is 0, the actor is
	// who asked for it and CreatedAt when.
	NoteID int64 `json:"note_id,omitempty"`
}

// SnippetText joins the snippet, wrapping matches in open and close (e.g. "**", "**").
func (h Hit) SnippetText(open, close string) string {
	var b strings.Builder
	for _, s := range h.Snippet {
		if s.Match {
			b.WriteString(open + s.Text + close)
		} else {
			b.WriteString(s.Text)
		}
	}
	return b.String()
}

// Options configure a Searcher. Zero values take defaults.
type Options struct {
	// WorkspaceDomain is the Slack workspace's host ("acme.slack.com"), used to build
	// permalinks; empty: hits have no permalink.
	WorkspaceDomain string
	// Now is the clock used for recency; default time.Now.
	Now func() time.Time
	// HalfLife is how fast recency fades: a message this old gets half the recency boost
	// of a new one; default 30 days.
	HalfLife time.Duration
	// Window, MaxWalk and Candidates tune the query plan of messages and of memory notes;
	// see Search. Defaults 1000, 30000 and 30 (never fewer candidates than the query's limit).
	Window, MaxWalk, Candidates int
}

// Searcher answers queries over the search projection. It is safe for concurrent use.
type Searcher struct {
	pool       *pgxpool.Pool
	domain     string
	now        func() time.Time
	halfLife   time.Duration
	window     int
	maxWalk    int
	candidates int
	words      *wordStats // shared by the copies OnStandby makes

	// standby, when set, routes the reads: onStandby and onPrimary are this Searcher on each
	// server (OnStandby).
	standby              *session.Standby
	consistency          session.Consistency
	onStandby, onPrimary *Searcher
}

// OnStandby returns a Searcher like s whose reads go to sb's streaming standby, as consistency
// c asks (serve's pages: session.ReadAny, as far as the standby has replayed, since the
// projection is itself behind the log by the indexer's poll; a one-shot command that has just
// synced the index: session.ReadYourWrites), and to sb's primary when the standby does not
// answer. A nil sb returns s.
func (s *Searcher) OnStandby(sb *session.Standby, c session.Consistency) *Searcher {
	if sb == nil {
		return s
	}
	on := func(pool *pgxpool.Pool) *Searcher {
		c := *s
		c.pool, c.standby, c.onStandby, c.onPrimary = pool, nil, nil, nil
		return &c
	}
	r := on(sb.Primary())
	r.standby, r.consistency, r.onStandby, r.onPrimary = sb, c, on(sb.StandbyPool()), on(sb.Primary())
	return r
}

// routed runs fn on the server s's standby routes the read to.
func routed[T any](ctx context.Context, s *Searcher, fn func(*Searcher) (T, error)) (T, error) {
	var out T
	err := session.ReadFrom(ctx, s.standby, s.consistency, s.onStandby, s.onPrimary, func(x *Searcher) (err error) {
		out, err = fn(x)
		return err
	})
	return out, err
}

// NewSearcher returns a Searcher reading through pool (SELECT on the projection suffices).
func NewSearcher(pool *pgxpool.Pool, opts Options) *Searcher {
	now := opts.Now
	if now == nil {
		now = time.Now
	}
	return &Searcher{
		pool:       pool,
		domain:     strings.TrimSuffix(strings.TrimPrefix(strings.TrimPrefix(opts.WorkspaceDomain, "https://"), "http://"), "/"),
		now:        now,
		halfLife:   cmp.Or(opts.HalfLife, 30*24*time.Hour),
		window:     cmp.Or(opts.Window, 1000),
		maxWalk:    cmp.Or(opts.MaxWalk, 30000),
		candidates: cmp.Or(opts.Candidates, 30),
		words:      &wordStats{},
	}
}

// Permalink returns the Slack permalink of a message (ts) in a thread, or of the thread's
// parent when ts is empty: https://<domain>/archives/<channel>/p<ts without dot>?thread_ts=<thread
// ts>&cid=<channel>. It returns "" when the workspace domain is not configured.
func (s *Searcher) Permalink(channel, threadTS, ts string) string {
	return Permalink(s.domain, channel, threadTS, ts)
}

// Permalink builds a Slack permalink; see Searcher.Permalink.
func Permalink(domain, channel, threadTS, ts string) string {
	if domain == "" || channel == "" || threadTS == "" {
		return ""
	}
	ts = cmp.Or(ts, threadTS)
	return "https://" + domain + "/archives/" + channel + "/p" + strings.Replace(ts, ".", "", 1) +
		"?thread_ts=" + threadTS + "&cid=" + channel
}

var slackID = regexp.MustCompile(`^[UWB][A-Z0-9]{2,}$`)

// filter is the WHERE clause a query's filters add, with its arguments.
type filter struct {
	conds []string
	args  []any
}

func (f *filter) add(cond string, v any) {
	f.args = append(f.args, v)
	f.conds = append(f.conds, strings.ReplaceAll(cond, "?", "$"+strconv.Itoa(len(f.args))))
}

func (f *filter) where() string {
	if len(f.conds) == 0 {
		return "true"
	}
	return strings.Join(f.conds, " AND ")
}

// validate checks q and returns it normalised.
func (q Query) validate() (Query, error) {
	q.Text = strings.TrimSpace(q.Text)
	if q.Text == "" {
		return q, ErrEmptyQuery
	}
	if !utf8.ValidString(q.Text) || strings.ContainsRune(q.Text, 0) {
		return q, &QueryError{Query: q.Text, Reason: "the query is not valid UTF-8 text"}
	}
	if len(q.Text) > MaxQueryLen {
		return q, &QueryError{Query: q.Text[:40] + "…", Reason: fmt.Sprintf("the query is longer than %d bytes", MaxQueryLen)}
	}
	if q.Limit < 0 || q.Limit > MaxLimit {
		return q, &QueryError{Query: q.Text, Reason: fmt.Sprintf("limit must be between 1 and %d", MaxLimit)}
	}
	q.Limit = cmp.Or(q.Limit, DefaultLimit)
	if !q.Since.IsZero() && !q.Until.IsZero() && !q.Since.Before(q.Until) {
		return q, &QueryError{Query: q.Text, Reason: "since must be before until"}
	}
	if q.After != "" {
		if _, err := parseCursor(q.After); err != nil {
			return q, &QueryError{Query: q.Text, Reason: "the page to continue from (after) is not one a search returned"}
		}
		if q.Kind == KindNotes {
			return q, &QueryError{Query: q.Text, Reason: "memory notes are all on the first page: there is no next page of notes"}
		}
	}
	switch q.Kind {
	case "", KindMessages, KindAll:
	case KindNotes:
		if q.Tools {
			return q, &QueryError{Query: q.Text, Reason: "tool calls and output are messages: search them with kind messages or all, not notes"}
		}
	default:
		return q, &QueryError{Query: q.Text, Reason: fmt.Sprintf("unknown kind %q: use %s, %s or %s", q.Kind, KindAll, KindMessages, KindNotes)}
	}
	q.Channel = strings.TrimPrefix(strings.TrimSpace(q.Channel), "#")
	q.Actor = strings.TrimPrefix(strings.TrimSpace(q.Actor), "@")
	return q, nil
}

// filter builds the filter of q; $1 is the query text.
func (q Query) filter() *filter {
	f := &filter{args: []any{q.Text}}
	if !q.Tools {
		f.conds = append(f.conds, "kind IN ('user', 'assistant')")
	}
	q.scope(f, columns{channel: "channel_id", byBot: "actor_kind = 'bot'", actor: "actor_id", session: "session_id", at: "created_at"})
	return f
}

// columns names, in a searched table, what Query's channel, actor, session and date filters
// read; byBot is the condition of what the agent wrote.
type columns struct{ channel, byBot, actor, session, at string }

// scope adds q's channel, actor, session and date filters over the columns c to f: messages
// and notes are filtered by the same rules.
func (q Query) scope(f *filter, c columns) {
	if q.Channel != "" {
		f.add(c.channel+" = ?", q.Channel)
	}
	switch {
	case q.Actor == "":
	case strings.EqualFold(q.Actor, "bot") || strings.EqualFold(q.Actor, "logbook"):
		f.conds = append(f.conds, c.byBot)
	case slackID.MatchString(q.Actor):
		f.add(c.actor+" = ?", q.Actor)
	default:
		f.add(c.actor+" IN (SELECT DISTINCT actor_id FROM search_docs WHERE lower(actor_name) = lower(?))", q.Actor)
	}
	if q.Session != (session.ID{}) {
		f.add(c.session+" = ?", q.Session)
	}
	if !q.Since.IsZero() {
		f.add(c.at+" >= ?", q.Since)
	}
	if !q.Until.IsZero() {
		f.add(c.at+" < ?", q.Until)
	}
}

const tsQuery = `websearch_to_tsquery('english', $1)`

// sqlCheckQuery tells whether the query has any searchable word: stop words ("the") and
// punctuation alone make an empty tsquery, which would silently match nothing.
// It also returns the planner's row count of search_docs and the query's lexemes (as the
// tsquery's text), for the plan choice.
const sqlCheckQuery = `SELECT numnode(` + tsQuery + `) > 0,
    (SELECT greatest(reltuples, 0)::bigint FROM pg_class WHERE oid = 'search_docs'::regclass),
    ` + tsQuery + `::text`

// table is what the plan choice knows of search_docs and the query before it reads any row:
// the (estimated) number of messages and the query's lexemes.
type table struct {
	docs    int64
	lexemes []string
	// allRequired: the query only ANDs its words (no OR, no NOT).
	allRequired bool
}

// Snippet markers: private-use characters that never occur in stored text (the indexer
// reads Slack and model text, which carry none), turned into Spans.
const (
	markStart = "\uE000"
	markStop  = "\uE001"
)

// Short messages are shown whole; longer ones as up to two fragments around the matches.
const (
	headlineShort   = `StartSel=` + markStart + `, StopSel=` + markStop + `, HighlightAll=true`
	headlineOptions = `StartSel=` + markStart + `, StopSel=` + markStop +
		`, MaxWords=35, MinWords=15, ShortWord=3, MaxFragments=2, FragmentDelimiter=" … "`
	headlineWhole = 280 // bytes: messages up to this long are shown whole
)

// Search returns the best hits for q, best first: messages of the sessions, channel memory
// notes, or both (Query.Kind; see notes.go for the notes).
//
// Ranking blends relevance (ts_rank_cd, normalised to 0..1) with recency: score =
// relevance × (1 + 2^(−age/HalfLife)), so a new message gets up to twice the score of an
// equally relevant old one. Candidates are the Candidates most recent matches (every match
// for rarer terms); only they are ranked, which keeps a common word as fast as a rare one.
//
// The plan is chosen explicitly, because PostgreSQL's estimate of a tsquery's selectivity is
// often far off (phrases, words missing from the statistics), and a wrong guess walks the
// whole time index for a rare word. First the Window newest messages that pass the filters
// are walked through a time index, stopping at Candidates matches (a common term stops
// after a few rows). If fewer match, their share estimates the term's frequency p, and the
// cheaper of two plans runs: walking on (Candidates/p rows, at most MaxWalk) or the GIN index
// alone (sequential and plain index scans disabled for that statement), which reads each
// word's whole posting list (its share of messages from PostgreSQL's statistics of the
// tsvector column, read at most every ten minutes) and every row holding all the words (a
// phrase's share of rows with all its words is measured in the same window; over the whole
// table, at least the product of its words' shares). The index is taken only when it is also
// within a budget (about two MaxWalks of walking, on a first page); else the walk goes on. A walk that
// reaches MaxWalk rows (one channel's or person's: an eighth of it) is cut (Page). Memory notes are found the same way, over their stored tsvectors, and
// never cut; KindAll searches messages and notes at once, on two connections.
//
// Errors: ErrEmptyQuery, *QueryError (errors.Is ErrInvalidQuery) for a query that cannot
// be run, or a database error.
func (s *Searcher) Search(ctx context.Context, q Query) ([]Hit, error) {
	p, err := s.SearchPage(ctx, q)
	return p.Hits, err
}

// SearchPage is Search with its paging: the hits and, when the search was cut (see Page),
// where to go on. Errors are Search's.
func (s *Searcher) SearchPage(ctx context.Context, q Query) (Page, error) {
	if s.standby != nil {
		return routed(ctx, s, func(x *Searcher) (Page, error) { return x.SearchPage(ctx, q) })
	}
	q, err := q.validate()
	if err != nil {
		return Page{}, err
	}
	var ok bool
	var t table
	var tsq string
	if err := s.pool.QueryRow(ctx, sqlCheckQuery, q.Text).Scan(&ok, &t.docs, &tsq); err != nil {
		return Page{}, fmt.Errorf("search %q: %w", q.Text, err)
	}
	t.lexemes, t.allRequired = lexemes(tsq), allRequired(tsq)
	if !ok {
		return Page{}, &QueryError{Query: q.Text, Reason: "it has no searchable words (only very common words or punctuation)"}
	}
	switch {
	case q.Kind == KindNotes:
		hits, err := s.notes(ctx, q)
		return Page{Hits: hits}, err
	case q.Kind == KindAll && q.After == "":
		return s.messagesAndNotes(ctx, q, t)
	}
	m, err := s.messages(ctx, q, t)
	return Page{Hits: m.hits, More: m.more}, err
}

const sqlRank = `
WITH q AS (SELECT ` + tsQuery + ` AS q),
r AS (
    SELECT d.session_id, d.seq, d.kind, d.channel_id, d.thread_ts, d.ts, d.actor_kind, d.actor_id,
           d.actor_name, d.created_at, d.edited, d.body,
           ts_rank_cd(d.tsv, q.q, 32)
             * (1 + power(2, -greatest(extract(epoch FROM $4::timestamptz - d.created_at), 0) / $5))
             AS score
    FROM unnest($2::uuid[], $3::bigint[]) AS c(session_id, seq)
    JOIN search_docs d ON d.session_id = c.session_id AND d.seq = c.seq
    CROSS JOIN q
    ORDER BY score DESC, d.created_at DESC, d.session_id DESC, d.seq DESC
    LIMIT $6
)
SELECT r.session_id, r.seq, r.kind, r.channel_id, r.thread_ts, r.ts, r.actor_kind, r.actor_id,
       r.actor_name, r.created_at, r.edited, coalesce(s.title, ''), r.score,
       ts_headline('english', r.body, q.q, CASE WHEN octet_length(r.body) <= $8 THEN $9 ELSE $7 END)
FROM r CROSS JOIN q
LEFT JOIN search_sessions s ON s.session_id = r.session_id
ORDER BY r.score DESC, r.created_at DESC, r.session_id DESC, r.seq DESC`

func (s *Searcher) rank(ctx context.Context, q Query, keys []docKey) ([]Hit, error) {
	ids, seqs := make([]session.ID, len(keys)), make([]int64, len(keys))
	for i, k := range keys {
		ids[i], seqs[i] = k.id, k.seq
	}
	rows, err := s.pool.Query(ctx, sqlRank, q.Text, ids, seqs, s.now(), s.halfLife.Seconds(), q.Limit, headlineOptions, headlineWhole, headlineShort)
	if err != nil {
		return nil, err
	}
	hits, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Hit, error) {
		var h Hit
		var snippet string
		err := row.Scan(&h.SessionID, &h.Seq, &h.Kind, &h.Channel, &h.ThreadTS, &h.TS, &h.ActorKind,
			&h.ActorID, &h.ActorName, &h.CreatedAt, &h.Edited, &h.Title, &h.Score, &snippet)
		h.Snippet = spans(snippet)
		h.Permalink = s.Permalink(h.Channel, h.ThreadTS, h.TS)
		return h, err
	})
	if err != nil {
		return nil, err
	}
	return hits, nil
}

// spans splits a ts_headline result on the markers.
func spans(s string) []Span {
	var out []Span
	for s != "" {
		i := strings.Index(s, markStart)
		if i < 0 {
			out = append(out, Span{Text: s})
			break
		}
		if i > 0 {
			out = append(out, Span{Text: s[:i]})
		}
		s = s[i+len(markStart):]
		j := strings.Index(s, markStop)
		if j < 0 {
			j = len(s)
		}
		out = append(out, Span{Text: s[:j], Match: true})
		s = strings.TrimPrefix(s[j:], markStop)
	}
	// Adjacent matched words read as one highlight.
	merged := out[:0]
	for _, sp := range out {
		if n := len(merged); n > 0 && merged[n-1].Match == sp.Match {
			merged[n-1].Text += sp.Text
			continue
		}
		merged = append(merged, sp)
	}
	return merged
}

// Errors of Search.
var (
	// ErrEmptyQuery: the query text is empty or only spaces.
	ErrEmptyQuery = errors.New("the search query is empty: type some words to look for")
	// ErrInvalidQuery matches every *QueryError.
	ErrInvalidQuery = errors.New("invalid search query")
)

// QueryError says why a query cannot be run; its message is fit to show to the person who
// typed it.
type QueryError struct {
	Query  string
	Reason string
}

func (e *QueryError) Error() string {
	return fmt.Sprintf("cannot search for %q: %s", e.Query, e.Reason)
}

// Is makes errors.Is(err, ErrInvalidQuery) true.
func (e *QueryError) Is(target error) bool { return target == ErrInvalidQuery }
