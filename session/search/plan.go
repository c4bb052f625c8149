package search

import (
	"bytes"
	"cmp"
	"context"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/logbook/logbook/session"
)

// The query plan of messages: which of the most recent matches are ranked, and how they are
// found (Search's doc says why the plan is chosen here, not by PostgreSQL).

// docKey is a message's place in the order the plans read messages: newest first, then by
// session and seq (a total order, so a page can start exactly where another stopped).
type docKey struct {
	at  time.Time
	id  session.ID
	seq int64
}

const orderNewest = `created_at DESC, session_id DESC, seq DESC`

// cursor is k as Page.More: base64url of "<unix µs>.<session id hex>.<seq>".
func (k docKey) cursor() string {
	return base64.RawURLEncoding.EncodeToString(fmt.Appendf(nil, "%d.%s.%d", k.at.UnixMicro(), hex.EncodeToString(k.id[:]), k.seq))
}

// above is a key just above k: a page that starts at it begins with k itself.
func (k docKey) above() docKey { k.seq++; return k }

var errCursor = errors.New("not a search cursor")

func parseCursor(s string) (docKey, error) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return docKey{}, errCursor
	}
	parts := strings.Split(string(b), ".")
	if len(parts) != 3 {
		return docKey{}, errCursor
	}
	us, err1 := strconv.ParseInt(parts[0], 10, 64)
	seq, err2 := strconv.ParseInt(parts[2], 10, 64)
	id, err3 := hex.DecodeString(parts[1])
	if err1 != nil || err2 != nil || err3 != nil || len(id) != len(session.ID{}) || seq < 1 {
		return docKey{}, errCursor
	}
	k := docKey{at: time.UnixMicro(us).UTC(), seq: seq}
	copy(k.id[:], id)
	return k, nil
}

// olderThan adds to f the condition that a message comes after k in the plans' order (the
// bound on created_at alone lets a time index start there).
func (f *filter) olderThan(k docKey) {
	f.add("created_at <= ?", k.at)
	n := len(f.args)
	f.args = append(f.args, k.id, k.seq)
	f.conds = append(f.conds, fmt.Sprintf("(created_at, session_id, seq) < ($%d, $%d, $%d)", n, n+1, n+2))
}

// found are the most recent matches a plan found, newest first.
type found struct {
	keys []docKey
	// cut: the plan stopped before it had looked at every message older than the last key
	// (it wanted more keys than it found): stop is the oldest message it looked at.
	cut  bool
	stop docKey
}

// messagePage is a page of message hits, with what messagesAndNotes needs to merge notes in.
type messagePage struct {
	hits []Hit
	keys []docKey // a page with more: the keys of hits (all its candidates), newest first
	more string
}

// messages are the best hits among the sessions' messages (Search), a page of them.
//
// A first page ranks the k = max(limit, Candidates) most recent matches and returns the best
// limit, as it always has; when the plan was cut (fewer than k found), it ranks the limit most
// recent of those found and returns all of them, with More where they end. A page after
// another (Query.After) wants limit + 1 matches older than the cursor: it ranks the limit most
// recent, and the one more says whether to go on.
func (s *Searcher) messages(ctx context.Context, q Query, t table) (messagePage, error) {
	f := q.filter()
	k := max(q.Limit, s.candidates)
	if q.After != "" {
		from, _ := parseCursor(q.After) // validate checked it
		f.olderThan(from)
		k = q.Limit + 1
	}
	fd, err := s.recentMatches(ctx, q, f, k, t)
	if err != nil {
		return messagePage{}, fmt.Errorf("search %q: %w", q.Text, err)
	}
	var page messagePage
	keys := fd.keys
	switch {
	case q.After != "" && len(keys) == k:
		keys = keys[:q.Limit]
		page.more = keys[len(keys)-1].cursor()
	case len(keys) >= k || !fd.cut: // a full first page, or nothing left
	case len(keys) > q.Limit:
		keys = keys[:q.Limit]
		page.more = keys[len(keys)-1].cursor()
	default:
		page.more = fd.stop.cursor()
	}
	if page.more != "" {
		page.keys = keys
	}
	if len(keys) == 0 {
		page.hits = []Hit{}
		return page, nil
	}
	if page.hits, err = s.rank(ctx, q, keys); err != nil {
		return messagePage{}, fmt.Errorf("search %q: %w", q.Text, err)
	}
	return page, nil
}

// recentMatches returns the k most recent matches of q that pass f (fewer when there are
// fewer, or when the plan is cut), choosing between walking the time index and the GIN index
// from what walking the newest messages says about the query's frequency and what
// PostgreSQL's statistics say about its words'; t holds the (estimated) number of messages,
// docs, and the query's lexemes.
//
// Walking reads messages newest first, several to a page, and stops at k matches: a common
// word costs a few rows. The GIN index steps through a posting list (an AND's rarest word's),
// then reads every message that holds all the query's words, each a random heap page: cheap
// for a rare word, and for a phrase of common words the dearest plan of all (the words are
// common, the phrase is not). After each stretch of the walk both costs are estimated again:
// walking on costs (k − found)/p rows, with p as low as what was seen allows; the index
// postingCost an item of that list (each word's share of messages from PostgreSQL's
// statistics of the tsvector column, wordStats) plus ginRowCost a message holding them all,
// their share as high as what was seen allows, and over the whole table at least the product
// of the words' shares (a window of 1,000 with no match yet says little: at ten million events "postgres
// replication" was in 1 of 2,000 newest messages and 1 in 176 of all, 25,000 heap pages and
// 130 ms through the index, where walking on found its 30 matches in 16,000 rows, 12 ms). A
// stretch at most doubles what was walked, so a rare word leaves the walk after a few
// thousand rows. The index is taken when it is the cheaper and within indexBudget; else the
// walk goes on, up to MaxWalk rows in all, and a walk stopped there is cut (More): a first
// page costs at most a walk of MaxWalk rows or an index of indexBudget (at ten million
// events "billing invoice payment", three words each in 6 % of messages and together in 1 in
// 2,800, steps through 246,000 items and reads 1,585 rows, 30 ms; its first page is the 2
// matches of the newest 30,000 rows, 15–19 ms, and More). A page after another (More) takes
// the index whenever it is the cheaper.
//
// A channel's or a person's messages are scattered through the table: walking them reads a
// heap page a row (scatteredRowCost), so their walk stops at MaxWalk/scatteredRowCost rows;
// the index ANDs its bitmap with their index's and reads only their rows that hold the words
// (scatteredGinCost) after reading its words' posting lists whole, however rare the words
// are together. A rare word takes the index after the first window (kerberos in one channel:
// 4 ms); a phrase of common words walks and is cut, where the index would first read the
// whole posting lists of its words (at ten million events, "deploy error" in one channel:
// 1.7 million postings, 130–190 ms; cut at 3,750 rows about 10 ms).
func (s *Searcher) recentMatches(ctx context.Context, q Query, f *filter, k int, t table) (found, error) {
	if q.Session != (session.ID{}) { // one session: few rows, the GIN index and a filter
		return s.bitmapKeys(ctx, s.ginSQL(f, k), f.args)
	}
	// The newest `window` messages that pass the filters.
	scattered := q.Channel != "" || q.Actor != ""
	fd, err := s.walk(ctx, f, nil, s.window, k, scattered)
	if err != nil || len(fd.keys) >= k || !fd.cut {
		return fd, err
	}
	walked := s.window
	rowCost, ginCost, maxWalk := 1.0, float64(ginRowCost), s.maxWalk
	if q.Channel != "" || q.Actor != "" {
		rowCost, ginCost, maxWalk = scatteredRowCost, scatteredGinCost, max(s.window, s.maxWalk/scatteredRowCost)
	}
	// The share of messages holding all the words (a phrase's words need not be adjacent
	// for the index), measured in the same window.
	pAnd := -1.0
	if strings.Contains(q.Text, `"`) {
		args := slices.Clone(f.args)
		args[0] = strings.ReplaceAll(q.Text, `"`, " ") // the phrases' words, not adjacent
		var n int64
		err := s.pool.QueryRow(ctx, `
SELECT count(*) FILTER (WHERE d.tsv @@ `+tsQuery+`)
FROM (SELECT tsv FROM search_docs WHERE `+f.where()+`
      ORDER BY `+orderNewest+` LIMIT `+strconv.Itoa(s.window)+`) d`, args...).Scan(&n)
		if err != nil {
			return fd, err
		}
		pAnd = float64(n) / float64(s.window)
	}
	// The index reads its words' whole posting lists, then a heap row for each message
	// holding all of them: the first from PostgreSQL's statistics of the words, the second
	// from the window, and over the whole table from the statistics too when they list every
	// word (a pair of medium words rarer in the newest messages than in the table: 1 in
	// 2,000 of the newest, 1 in 176 of all, 25,000 rows through the index).
	postings, together, err := s.wordShares(ctx, t)
	if err != nil {
		return fd, err
	}
	if q.Channel != "" || q.Actor != "" {
		together = 0 // the channel's or person's rows are read, not the table's
	}
	for {
		// What was walked bounds the share of matches p: no match yet is not "never" (half a
		// match), and a few matches may be a few more (two more).
		n := float64(len(fd.keys))
		pLow, pHigh := max(n, 0.5)/float64(walked), (n+2)/float64(walked)
		walkOn := rowCost * float64(k-len(fd.keys)) / pLow
		gin := indexCost(ginCost, max(pAnd, pHigh, together), postings, t.docs)
		// The index when it is the cheaper and affordable; else walking on, which stops at
		// maxWalk, cut: a first page never pays for an index dearer than indexBudget.
		if takesIndex(walkOn, gin, q.After != "") {
			break
		}
		if walked >= maxWalk {
			return fd, nil // cut: the caller returns what was found, with More
		}
		rows := min(maxWalk-walked, s.stretch(min(walked, int(math.Min(1.5*walkOn/rowCost, math.MaxInt32)))))
		more, err := s.walk(ctx, f, &fd.stop, rows, k-len(fd.keys), scattered)
		if err != nil {
			return fd, err
		}
		walked += rows
		fd.keys, fd.cut, fd.stop = append(fd.keys, more.keys...), more.cut, more.stop
		if len(fd.keys) >= k || !fd.cut {
			return fd, nil
		}
	}
	// A rare term: the GIN index finds every match.
	return s.bitmapKeys(ctx, s.ginSQL(f, k), f.args)
}

// walk reads the `rows` newest messages that pass f (older than from, when set) and returns
// the first k that match, and where it stopped: the rows-th message comes back too, matching
// or not. The LIMIT in the innermost subquery fences the tsquery out of the scan, so the time
// (or channel, actor) index drives it.
//
// Over the whole table (scattered false: no channel or person) the time index
// search_docs_walk holds the walk's whole order and the kind: the matches come from one
// scan, the stop from an index-only scan of the same rows. One channel's or person's rows
// are numbered instead (row_number), the stop being the rows-th.
func (s *Searcher) walk(ctx context.Context, f *filter, from *docKey, rows, k int, scattered bool) (found, error) {
	if from != nil {
		f = &filter{conds: slices.Clone(f.conds), args: slices.Clone(f.args)}
		f.olderThan(*from)
	}
	last := strconv.Itoa(rows)
	// k is bound, rows is in the text (it fences the scan, and the plan depends on it): the
	// stretches are few sizes (stretch), so a walk's statements are prepared and planned once
	// a connection, not once a query (a new statement text cost 1–4 ms to prepare and plan).
	args := append(slices.Clone(f.args), k)
	limitK := "$" + strconv.Itoa(len(args))
	sql := `
(SELECT session_id, seq, created_at, true, false FROM (
    SELECT session_id, seq, created_at, tsv @@ ` + tsQuery + ` AS m FROM search_docs
    WHERE ` + f.where() + `
    ORDER BY ` + orderNewest + ` LIMIT ` + last + `
) d WHERE m ORDER BY ` + orderNewest + ` LIMIT ` + limitK + `)
UNION ALL
(SELECT session_id, seq, created_at, false, true FROM search_docs
 WHERE ` + f.where() + `
 ORDER BY ` + orderNewest + ` OFFSET ` + strconv.Itoa(rows-1) + ` LIMIT 1)`
	if scattered {
		sql = `
SELECT session_id, seq, created_at, m, n = ` + last + ` FROM (
    SELECT session_id, seq, created_at, m, row_number() OVER (ORDER BY ` + orderNewest + `) AS n
    FROM (
        SELECT session_id, seq, created_at, tsv @@ ` + tsQuery + ` AS m FROM search_docs
        WHERE ` + f.where() + `
        ORDER BY ` + orderNewest + ` LIMIT ` + last + `
    ) d
) w
WHERE m OR n = ` + last + `
ORDER BY ` + orderNewest + ` LIMIT ` + limitK
	}
	var fd found
	r, err := s.pool.Query(ctx, sql, args...)
	if err != nil {
		return fd, err
	}
	defer r.Close()
	for r.Next() {
		var key docKey
		var match, isLast bool
		if err := r.Scan(&key.id, &key.seq, &key.at, &match, &isLast); err != nil {
			return fd, err
		}
		if match {
			fd.keys = append(fd.keys, key)
		}
		if isLast {
			fd.cut, fd.stop = true, key
		}
	}
	if err := r.Err(); err != nil {
		return fd, err
	}
	// UNION ALL's branches come back in order, but nothing in SQL says so: the matches are
	// put in the walk's order here (there are at most k).
	slices.SortStableFunc(fd.keys, func(a, b docKey) int { return -a.compare(b) })
	if len(fd.keys) > k { // the last row matched beyond k: it was only the stop
		fd.keys = fd.keys[:k]
	}
	return fd, nil
}

// stretch is how many rows the walk reads next for a wish of n: n rounded up to the window
// times a power of two, so a walk's statements come in few sizes.
func (s *Searcher) stretch(n int) int {
	rows := s.window
	for rows < n && rows < math.MaxInt32/2 {
		rows *= 2
	}
	return rows
}

// compare orders keys as the walk's order does, oldest first: by created_at, session id and
// seq.
func (k docKey) compare(o docKey) int {
	return cmp.Or(k.at.Compare(o.at), bytes.Compare(k.id[:], o.id[:]), cmp.Compare(k.seq, o.seq))
}

func (s *Searcher) ginSQL(f *filter, k int) string {
	return `
SELECT session_id, seq, created_at FROM search_docs
WHERE tsv @@ ` + tsQuery + ` AND ` + f.where() + `
ORDER BY ` + orderNewest + ` LIMIT ` + strconv.Itoa(k)
}

// The plans' costs, in rows of the time walk (at ten million events, 0.6 µs a row).
const (
	// ginRowCost is what reading a row through the GIN index costs: a random heap page,
	// where the walk reads rows in time order, several to a page, mostly cached.
	ginRowCost = 10
	// scatteredRowCost is what walking one channel's or one person's messages costs a row: a
	// heap page a row (5 µs).
	scatteredRowCost = 8
	// scatteredGinCost is what the GIN index costs a message of the whole table holding the
	// query's words, when its bitmap is ANDed with a channel's or a person's: it reads the
	// words' posting lists whole, and only that channel's rows of the heap ("deploy error",
	// 189,000 messages hold both words: 160 ms; "postgres replication", 25,000: 21 ms).
	scatteredGinCost = 1.5
	// postingCost is what the GIN index costs an item of the posting list it steps through
	// (wordStats.postings), with the lookups into the other words' lists and the bitmap of
	// the messages holding them all: 100–170 ns at ten million events ("deploy error" 750,000
	// items in 125–140 ms, three words each in 6 % of messages 246,000 in 25 ms).
	postingCost = 0.3
	// indexBudget is the dearest index a first page takes (two default MaxWalks, about the
	// 25 ms a search is meant to take at ten million events); a dearer one is left for the
	// walk, cut at MaxWalk.
	indexBudget = 60_000
)

// indexCost is what finding a query's matches through the GIN index costs, in rows of the
// time walk: perMatch a message holding all its words (a share p of the docs messages), after
// reading its words' posting lists (postings: the sum of the words' shares of messages).
func indexCost(perMatch, p, postings float64, docs int64) float64 {
	return (perMatch*p + postingCost*postings) * float64(docs)
}

// takesIndex tells whether a plan leaves the walk for the index: when the index is the
// cheaper and, on a first page, within indexBudget (costs in rows of the time walk). A page
// after another (More) takes it whenever it is the cheaper: whoever asks for more wants it,
// and a phrase that is nowhere would else come back as page after empty page.
func takesIndex(walkOn, gin float64, more bool) bool {
	return walkOn > gin && (more || gin <= indexBudget)
}

// bitmapKeys runs sql in a read-only transaction that allows only bitmap scans, so the GIN
// index drives it whatever the planner guesses about the query's selectivity. It finds every
// match: the result is never cut.
func (s *Searcher) bitmapKeys(ctx context.Context, sql string, args []any) (found, error) {
	var fd found
	err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, sqlBitmapOnly); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, sql, args...)
		if err != nil {
			return err
		}
		fd.keys, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (docKey, error) {
			var k docKey
			return k, row.Scan(&k.id, &k.seq, &k.at)
		})
		return err
	})
	return fd, err
}

// sqlBitmapOnly allows only bitmap scans, and no parallel workers: starting them costs more
// than they save on a search's few thousand rows (at ten million events, 400,000 notes: the
// notes of "deploy error" through the index in 29–36 ms with two workers, 20–24 ms without),
// and they take the cores other searches run on.
const sqlBitmapOnly = `SET LOCAL enable_seqscan = off; SET LOCAL enable_indexscan = off; SET LOCAL enable_indexonlyscan = off; SET LOCAL max_parallel_workers_per_gather = 0`
