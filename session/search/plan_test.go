package search_test

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/logbook/logbook/session"
	"github.com/logbook/logbook/session/search"
)

// corpus is a seeded log where the plans' every case appears: a common word, a medium one, a
// rare one, and "deploy error", a phrase of two words that are in almost every message but
// adjacent in one in twelve, which the walk finds too slowly and the GIN index reads every
// message for.
type corpus struct {
	*fixture
	now time.Time
}

func newCorpus(t *testing.T) *corpus {
	t.Helper()
	now := time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
	f := newFixture(t, search.Options{})
	c := &corpus{fixture: f, now: now}
	n := 0
	for ch := range 3 {
		for th := range 4 {
			s := f.open(fmt.Sprintf("C000000%d", ch+1), fmt.Sprintf("1700000%03d.000100", ch*10+th))
			var evs []session.NewEvent
			for i := range 30 {
				n++
				text := fmt.Sprintf("error while we deploy build %d of the service", n)
				switch {
				case n%12 == 0:
					text = fmt.Sprintf("deploy error again in build %d, error logs attached", n)
				case n%12 == 5:
					text = fmt.Sprintf("the deploy error of build %d and the deploy error before it", n) // ranks higher
				}
				if n%5 == 0 {
					text += " medium"
				}
				if n == 17 || n == 250 || n == 333 {
					text += " zeppelin"
				}
				if i%3 == 2 {
					evs = append(evs, botMsg(text))
				} else {
					evs = append(evs, userMsg(s, fmt.Sprintf("U000000%d", n%4+1), "alice", fmt.Sprintf("1700000%03d.%06d", ch*10+th, 200+i), text))
				}
			}
			f.append(s, evs...)
		}
	}
	f.catchUp()
	// A message every minute over the last six hours, in an order that crosses sessions and
	// channels, with a few exact ties of created_at (the order falls back on session and seq).
	if _, err := f.admin.Exec(f.ctx, `
UPDATE search_docs d SET created_at = $1::timestamptz - make_interval(mins => (r.i / 2 * 2)::int)
FROM (SELECT session_id, seq, row_number() OVER (ORDER BY (seq * 7919 + get_byte(uuid_send(session_id), 0)) % 1000, session_id, seq) AS i
      FROM search_docs) r
WHERE d.session_id = r.session_id AND d.seq = r.seq`, now); err != nil {
		t.Fatal(err)
	}
	if _, err := f.admin.Exec(f.ctx, "ANALYZE search_docs"); err != nil {
		t.Fatal(err)
	}
	return c
}

// searcher is a Searcher over the corpus with its clock; a small window and walk force the
// plans on a small data set.
func (c *corpus) searcher(window, maxWalk, candidates int) *search.Searcher {
	return search.NewSearcher(c.pool, search.Options{Now: func() time.Time { return c.now },
		Window: window, MaxWalk: maxWalk, Candidates: candidates})
}

type key struct {
	id  session.ID
	seq int64
}

// sqlNewestRanked is what a search that is not cut returns, in one statement: the k most
// recent matches, ranked, the best limit of them.
const sqlNewestRanked = `
WITH c AS (
    SELECT session_id, seq, created_at, tsv FROM search_docs
    WHERE tsv @@ websearch_to_tsquery('english', $1) AND kind IN ('user', 'assistant')
    ORDER BY created_at DESC, session_id DESC, seq DESC LIMIT $2
)
SELECT session_id, seq FROM c
ORDER BY ts_rank_cd(tsv, websearch_to_tsquery('english', $1), 32)
           * (1 + power(2, -greatest(extract(epoch FROM $3::timestamptz - created_at), 0) / $4)) DESC,
         created_at DESC, session_id DESC, seq DESC
LIMIT $5`

func (c *corpus) want(text string, k, limit int) []key {
	c.t.Helper()
	rows, err := c.admin.Query(c.ctx, sqlNewestRanked, text, k, c.now, (30 * 24 * time.Hour).Seconds(), limit)
	if err != nil {
		c.t.Fatal(err)
	}
	defer rows.Close()
	var out []key
	for rows.Next() {
		var k key
		if err := rows.Scan(&k.id, &k.seq); err != nil {
			c.t.Fatal(err)
		}
		out = append(out, k)
	}
	return out
}

// allMatches are every message that matches text, newest first.
func (c *corpus) allMatches(text string) []key {
	c.t.Helper()
	rows, err := c.admin.Query(c.ctx, `SELECT session_id, seq FROM search_docs
WHERE tsv @@ websearch_to_tsquery('english', $1) AND kind IN ('user', 'assistant')
ORDER BY created_at DESC, session_id DESC, seq DESC`, text)
	if err != nil {
		c.t.Fatal(err)
	}
	defer rows.Close()
	var out []key
	for rows.Next() {
		var k key
		if err := rows.Scan(&k.id, &k.seq); err != nil {
			c.t.Fatal(err)
		}
		out = append(out, k)
	}
	return out
}

func hitKeys(hits []search.Hit) []key {
	var out []key
	for _, h := range hits {
		if h.Kind != search.HitNote {
			out = append(out, key{h.SessionID, h.Seq})
		}
	}
	return out
}

// Queries that are not cut return what they always have: the best `limit` of the k most
// recent matches, in the same order, whichever plan found them, at the limits the web page
// (40), the CLI (20) and /logbook search (20 for 5 shown) ask for; a common-word phrase that
// the walk finds too slowly comes back cut, with More, instead of reading every message.
func TestSearchPagesNotCutAreTheNewestMatchesRanked(t *testing.T) {
	t.Parallel()
	c := newCorpus(t)
	for _, o := range []struct {
		name                        string
		window, maxWalk, candidates int
		cut                         map[string]bool // the queries this searcher cuts
	}{
		{"defaults", 0, 0, 0, nil},
		{"short walk", 10, 40, 0, map[string]bool{`"deploy error"`: true}},
		{"tiny window", 5, 200, 3, nil},
	} {
		s := c.searcher(o.window, o.maxWalk, o.candidates)
		for _, text := range []string{"error", "deploy", "medium", "zeppelin", `"deploy error"`, "zeppelin OR medium", "medium -zeppelin", "absent"} {
			for _, limit := range []int{40, 20, 5} {
				p, err := s.SearchPage(c.ctx, search.Query{Text: text, Limit: limit})
				if err != nil {
					t.Fatalf("%s %q: %v", o.name, text, err)
				}
				if got := p.More != ""; got != o.cut[text] {
					t.Errorf("%s %q limit %d: cut %v, want %v", o.name, text, limit, got, o.cut[text])
					continue
				}
				if p.More != "" {
					continue // TestSearchMorePagesReturnEveryMatchOnce
				}
				want := c.want(text, max(limit, cmpOr(o.candidates, 30)), limit)
				if got := hitKeys(p.Hits); !slices.Equal(got, want) {
					t.Errorf("%s %q limit %d:\n got %v\nwant %v", o.name, text, limit, got, want)
				}
				if text == "absent" && (p.Hits == nil || len(p.Hits) != 0) {
					t.Errorf("%s %q: %v, want an empty list", o.name, text, p.Hits)
				}
			}
		}
	}
}

func cmpOr(a, b int) int {
	if a != 0 {
		return a
	}
	return b
}

// Following More returns every match of a cut search once: no page repeats a message, none
// is skipped, each page's messages are older than the page before's, and the last page has
// no More. Messages and notes (KindAll) page the same way; notes are on the first page.
func TestSearchMorePagesReturnEveryMatchOnce(t *testing.T) {
	t.Parallel()
	c := newCorpus(t)
	if _, err := c.admin.Exec(c.ctx, `INSERT INTO channel_memory (team, channel, text, by_kind, by_id, created_at)
VALUES ('T0000001', 'C0000001', 'the deploy error runbook: deploy error means roll back', 'user', 'U0000001', $1),
       ('T0000001', 'C0000002', 'deploy error budget is weekly', 'user', 'U0000002', $1)`, c.now.Add(-time.Minute)); err != nil {
		t.Fatal(err)
	}
	s := c.searcher(10, 40, 0)
	const text = `"deploy error"`
	all := c.allMatches(text)
	if len(all) < 40 {
		t.Fatalf("the corpus has %d matches of %s; want enough for several pages", len(all), text)
	}
	for _, kind := range []string{search.KindMessages, search.KindAll} {
		for _, limit := range []int{3, 7, 20} {
			q := search.Query{Text: text, Limit: limit, Kind: kind}
			var got []key
			notes := 0
			pages := 0
			for {
				p, err := s.SearchPage(c.ctx, q)
				if err != nil {
					t.Fatalf("%s limit %d page %d: %v", kind, limit, pages+1, err)
				}
				pages++
				if len(p.Hits) > limit {
					t.Fatalf("%s limit %d page %d: %d hits", kind, limit, pages, len(p.Hits))
				}
				for _, h := range p.Hits {
					if h.Kind == search.HitNote {
						notes++
						if pages > 1 {
							t.Errorf("%s limit %d: a note on page %d", kind, limit, pages)
						}
					}
				}
				page := hitKeys(p.Hits)
				// A page is a run of the matches, newest first, ranked inside.
				slices.SortFunc(page, func(a, b key) int { return slices.Index(all, a) - slices.Index(all, b) })
				got = append(got, page...)
				if p.More == "" {
					break
				}
				if pages > len(all)+2 {
					t.Fatalf("%s limit %d: More never ends", kind, limit)
				}
				q.After = p.More
			}
			if !slices.Equal(got, all) {
				t.Errorf("%s limit %d: %d pages hold %d messages; want every one of the %d matches once, in time order:\n got %v\nwant %v",
					kind, limit, pages, len(got), len(all), got, all)
			}
			if pages < 2 {
				t.Errorf("%s limit %d: one page: the search was not cut", kind, limit)
			}
			if kind == search.KindAll && notes != 2 {
				t.Errorf("limit %d: %d notes on the pages, want both", limit, notes)
			}
		}
	}

	// A cursor that no search returned is refused; so is paging notes alone.
	for _, q := range []search.Query{{Text: text, After: "not-a-cursor"}, {Text: text, After: "bm90LmEuY3Vyc29y"}} {
		if _, err := s.SearchPage(c.ctx, q); !errors.Is(err, search.ErrInvalidQuery) {
			t.Errorf("After %q: %v, want ErrInvalidQuery", q.After, err)
		}
	}
	p, err := s.SearchPage(c.ctx, search.Query{Text: text, Limit: 5})
	if err != nil || p.More == "" {
		t.Fatalf("first page: %v, %v; want a cut page", p, err)
	}
	if _, err := s.SearchPage(c.ctx, search.Query{Text: text, Kind: search.KindNotes, After: p.More}); !errors.Is(err, search.ErrInvalidQuery) {
		t.Errorf("notes after a page: %v, want ErrInvalidQuery", err)
	}
}

// Notes are looked for among the newest ones first: a common word's newest matches are
// there; a medium word's are further on (the walk goes on), and a word only older notes hold
// is still found (through the index). Every plan returns the best of the k most recent
// matches, whatever the window and walk, and a forgotten note is in none.
func TestSearchNotesWalkAndIndexAgree(t *testing.T) {
	t.Parallel()
	f := newFixture(t, search.Options{})
	var ids []int64
	for i := range 340 {
		text := fmt.Sprintf("note %d: deploy with care", i)
		if i < 2 {
			text += ", zeppelin"
		}
		if i%7 == 0 {
			text += ", deploy deploy" // ranks higher
		}
		if i%11 == 0 {
			text += ", medium"
		}
		ids = append(ids, f.note(session.Note{Channel: "C0000001", Text: text, ByKind: session.NoteByUser, By: "U0000001"}).ID)
	}
	if _, err := f.store.ForgetNote(f.ctx, "T0000001", "C0000001", ids[len(ids)-7], "U0000002"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.admin.Exec(f.ctx, "ANALYZE channel_memory"); err != nil {
		t.Fatal(err)
	}
	want := func(text string, k, limit int) []int64 {
		rows, err := f.admin.Query(f.ctx, `
WITH c AS (SELECT id, text FROM channel_memory m
           WHERE to_tsvector('english', text) @@ websearch_to_tsquery('english', $1)
             AND NOT EXISTS (SELECT 1 FROM channel_memory_forgotten x WHERE x.note_id = m.id)
           ORDER BY id DESC LIMIT $2)
SELECT id FROM c ORDER BY ts_rank_cd(to_tsvector('english', text), websearch_to_tsquery('english', $1), 32) DESC, id DESC LIMIT $3`, text, k, limit)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var out []int64
		for rows.Next() {
			var id int64
			if err := rows.Scan(&id); err != nil {
				t.Fatal(err)
			}
			out = append(out, id)
		}
		return out
	}
	for _, o := range []search.Options{
		{},                                       // a window holds every note
		{Window: 10, MaxWalk: 100},               // a medium word walks on; a rare one takes the index
		{Window: 5, MaxWalk: 400, Candidates: 3}, // a long walk
		{Window: 20, MaxWalk: 20},                // no walk past the window: the index
	} {
		s := search.NewSearcher(f.pool, o)
		for _, c := range []struct {
			text  string
			limit int
		}{{"deploy", 5}, {"deploy", 40}, {"zeppelin", 5}, {"medium", 5}, {"medium", 40}, {`"deploy deploy"`, 20},
			{`"deploy deploy" medium`, 5}, {"medium -zeppelin", 5}, {"absent", 5}} {
			hits, err := s.Search(f.ctx, search.Query{Text: c.text, Kind: search.KindNotes, Limit: c.limit})
			if err != nil {
				t.Fatalf("%+v %q: %v", o, c.text, err)
			}
			got := noteIDs(hits)
			w := want(c.text, max(c.limit, cmpOr(o.Candidates, 30)), c.limit)
			if !slices.Equal(got, w) || (len(got) == 0) != (c.text == "absent") {
				t.Errorf("%+v %q limit %d: notes %v, want %v", o, c.text, c.limit, got, w)
			}
			if slices.Contains(got, ids[len(ids)-7]) {
				t.Errorf("%+v %q: a forgotten note is found", o, c.text)
			}
		}
	}
}

// The plan reads each word's share of messages from PostgreSQL's statistics of the tsvector
// column (ANALYZE's most common lexemes): in the corpus deploy and error are in every
// message, so the index steps through a whole posting list for "deploy error" (its rarest
// word's: an AND is driven by it); "deploy zeppelin" only through zeppelin's, in three
// messages of 360; an OR through both.
func TestPostingShareFromStatistics(t *testing.T) {
	t.Parallel()
	c := newCorpus(t)
	s := c.searcher(0, 0, 0)
	for _, w := range []struct {
		text     string
		min, max float64
	}{
		{`"deploy error"`, 0.95, 1.01},
		{"deploy", 0.95, 1.01},
		{"zeppelin", 0, 0.02},
		{"deploy zeppelin", 0, 0.02},
		{"deploy OR zeppelin", 0.95, 1.03},
	} {
		got, err := search.PostingShare(c.ctx, s, w.text)
		if err != nil {
			t.Fatal(err)
		}
		if got < w.min || got > w.max {
			t.Errorf("%s: posting lists %.3f of the messages, want %.2f–%.2f", w.text, got, w.min, w.max)
		}
	}
}
