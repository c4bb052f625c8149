package search

import (
	"context"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// The GIN index reads the posting list of every word of a query whole (a phrase's too, before
// the heap's recheck of adjacency), so what a search through it costs grows with how many
// messages hold each word, whatever the filters and however rare the words are together.
// PostgreSQL's statistics of search_docs.tsv say it: ANALYZE keeps the most common lexemes
// (most_common_elems) and the share of rows holding each (most_common_elem_freqs, followed by
// their minimum and maximum). They are read once and kept for wordStatsTTL: a lexeme's share
// moves with the table, not with a query.

// wordStatsTTL is how long the statistics read are used (autovacuum analyzes a large table
// seldom more often).
const wordStatsTTL = 10 * time.Minute

// defaultWordShare is PostgreSQL's share of a lexeme it has no statistics for (ts_selfuncs.c,
// DEFAULT_TS_MATCH_SEL); a lexeme missing from most_common_elems is at most half the least
// frequent listed, as PostgreSQL's own estimate takes it.
const defaultWordShare = 0.005

type wordStats struct {
	mu      sync.Mutex
	read    time.Time
	share   map[string]float64 // lexeme → share of rows holding it
	minimum float64            // the least share listed; 0: no statistics
}

const sqlWordStats = `
SELECT coalesce(most_common_elems::text::text[], '{}'), coalesce(most_common_elem_freqs, '{}')
FROM pg_stats
WHERE format('%I.%I', schemaname, tablename)::regclass = 'search_docs'::regclass AND attname = 'tsv'`

// load reads the statistics when those held are older than wordStatsTTL.
func (w *wordStats) load(ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, now time.Time) error {
	if !w.read.IsZero() && now.Sub(w.read) < wordStatsTTL {
		return nil
	}
	var elems []string
	var freqs []float64
	err := q.QueryRow(ctx, sqlWordStats).Scan(&elems, &freqs)
	if err != nil && err != pgx.ErrNoRows { // no row: never analyzed
		return err
	}
	w.share, w.minimum = make(map[string]float64, len(elems)), 0
	if len(freqs) >= len(elems)+2 && len(elems) > 0 { // the per-lexeme shares, then min and max
		for i, e := range elems {
			w.share[e] = freqs[i]
		}
		w.minimum = freqs[len(elems)]
	}
	w.read = now
	return nil
}

// postings is the estimated share of the table the GIN index steps through for the lexemes.
// When every lexeme is required (all) that is the least frequent one's posting list: the
// index's fast scan drives an AND from its rarest word and looks the others up only at its
// items (at ten million events, "disk pressure" reads the 31,000 items of pressure and
// skips through disk's 500,000 in 4.7 ms, where "deploy error", both common, steps through
// deploy's 750,000 in 125–140 ms). Else (OR, NOT) it is the sum of their lists. A lexeme
// missing from the statistics counts half the least frequent listed, at most
// defaultWordShare, as PostgreSQL's own estimate takes it. Without statistics (a table never
// analyzed) it is 0: the plan then prices the index by its matches alone.
func (w *wordStats) postings(lexemes []string, all bool) float64 {
	if w.minimum == 0 || len(lexemes) == 0 {
		return 0
	}
	sum, least := 0.0, 1.0
	for _, l := range lexemes {
		p, ok := w.share[l]
		if !ok {
			p = min(defaultWordShare, w.minimum/2)
		}
		sum, least = sum+p, min(least, p)
	}
	if all {
		return least
	}
	return sum
}

// together is the estimated share of rows holding every one of the lexemes, were they
// independent: the product of their shares. It is 0 (unknown) when a lexeme is not listed: a
// word rarer than every listed one makes the index cheap, and the walk's window says so.
func (w *wordStats) together(lexemes []string) float64 {
	if w.minimum == 0 || len(lexemes) == 0 {
		return 0
	}
	p := 1.0
	for _, l := range lexemes {
		s, ok := w.share[l]
		if !ok {
			return 0
		}
		p *= s
	}
	return p
}

// wordShares returns, for t's query, the share of the table the GIN index steps through
// (wordStats.postings) and, when every word is required (no OR, no NOT), the share of rows
// holding them all were they independent (wordStats.together; else 0), reading the
// statistics when needed.
func (s *Searcher) wordShares(ctx context.Context, t table) (postings, together float64, err error) {
	s.words.mu.Lock()
	defer s.words.mu.Unlock()
	if err := s.words.load(ctx, s.pool, time.Now()); err != nil {
		return 0, 0, err
	}
	if t.allRequired {
		together = s.words.together(t.lexemes)
	}
	return s.words.postings(t.lexemes, t.allRequired), together, nil
}

// allRequired tells whether a tsquery (its text form) only ANDs its lexemes (& and the phrase
// operators), with no OR (|) or NOT (!) outside the quoted lexemes.
func allRequired(tsquery string) bool {
	return !strings.ContainsAny(tsLexeme.ReplaceAllString(tsquery, ""), "|!")
}

var tsLexeme = regexp.MustCompile(`'((?:[^']|'')+)'`)

// lexemes are the distinct lexemes of a tsquery in its text form ('deploy' <-> 'error').
func lexemes(tsquery string) []string {
	var out []string
	for _, m := range tsLexeme.FindAllStringSubmatch(tsquery, -1) {
		l := strings.ReplaceAll(m[1], "''", "'")
		if !slices.Contains(out, l) {
			out = append(out, l)
		}
	}
	return out
}
