package search

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"golang.org/x/sync/errgroup"

	"github.com/logbook/logbook/session"
)

// What a Query searches (Query.Kind).
const (
	KindMessages = "messages" // the sessions' messages (the default, also "")
	KindNotes    = "notes"    // the channels' memory notes
	KindAll      = "all"      // both, ranked together
)

// HitNote is the Kind of a hit that is a channel memory note.
const HitNote = "note"

// Channel memory notes are searched in the table that keeps them (channel_memory), through
// the tsvector it stores of each note's text and its GIN index (channel_memory_tsv, migration
// 00380): a note is short and a channel's memory small, so no projection is needed, and a
// note is found the moment it is added. Only notes that may be offered are found: a forgotten
// note (/logbook forget) is not, as a deleted message's text is not, and retention's purge
// empties the text (NULL), and so the tsvector, so a purged note is gone from the index.
// Auditors read forgotten notes in exports and transcripts.

// noteFilter builds the filter of q over channel_memory m; $1 is the query text.
func (q Query) noteFilter() *filter {
	f := &filter{args: []any{q.Text}}
	q.scope(f, columns{channel: "m.channel", byBot: "m.by_kind = 'agent'", actor: "m.by_id", session: "m.session_id", at: "m.created_at"})
	return f
}

// noteGinCost is what a note read through the GIN index costs, in notes walked (measured at
// 400,000 notes: 0.45 µs a note walked, 2.8 µs a note read and checked through the index).
const noteGinCost = 6

const sqlNoteCount = `SELECT greatest(reltuples, 0)::bigint FROM pg_class WHERE oid = 'channel_memory'::regclass`

// sqlNotForgotten is the condition that note m is not forgotten.
const sqlNotForgotten = `NOT EXISTS (SELECT 1 FROM channel_memory_forgotten x WHERE x.note_id = m.id)`

// notes are the best channel memory notes for q (Search with KindNotes): the k most recent
// matches, ranked, as for messages.
func (s *Searcher) notes(ctx context.Context, q Query) ([]Hit, error) {
	k := max(q.Limit, s.candidates)
	ids, err := s.recentNotes(ctx, q, k)
	if err != nil {
		return nil, fmt.Errorf("search notes for %q: %w", q.Text, err)
	}
	if len(ids) == 0 {
		return []Hit{}, nil
	}
	hits, err := s.rankNotes(ctx, q, ids)
	if err != nil {
		return nil, fmt.Errorf("search notes for %q: %w", q.Text, err)
	}
	return hits, nil
}

// recentNotes returns the ids of the k most recent notes that match q (fewer when there are
// fewer), newest first, as recentMatches does for messages: the newest Window notes are
// walked, then, while walking on is the cheaper and ends within MaxWalk notes, the walk goes
// on, else the GIN index finds every match (notes are never cut). Walking reads each note's
// stored tsvector, newest first through the primary key; the index reads every note holding
// all the query's words, a heap page each, and checks a phrase on each. At 400,000 notes,
// "deploy error" (in 1 note in 1,200, both its words in 1 in 56) costs either plan 15–20 ms,
// where computing each note's tsvector cost 170 ms.
func (s *Searcher) recentNotes(ctx context.Context, q Query, k int) ([]int64, error) {
	f := q.noteFilter()
	ids, stop, cut, err := s.walkNotes(ctx, f, 0, s.window, k)
	if err != nil || len(ids) >= k || !cut {
		return ids, err
	}
	var notes int64
	if err := s.pool.QueryRow(ctx, sqlNoteCount).Scan(&notes); err != nil {
		return nil, err
	}
	// The share of notes holding all the words, for a phrase (see recentMatches).
	pAnd := -1.0
	if strings.Contains(q.Text, `"`) {
		args := slices.Clone(f.args)
		args[0] = strings.ReplaceAll(q.Text, `"`, " ")
		var n int64
		err := s.pool.QueryRow(ctx, `
SELECT count(*) FILTER (WHERE m.tsv @@ `+tsQuery+`)
FROM (SELECT m.tsv FROM channel_memory m WHERE `+f.where()+` ORDER BY m.id DESC LIMIT `+strconv.Itoa(s.window)+`) m`,
			args...).Scan(&n)
		if err != nil {
			return nil, err
		}
		pAnd = float64(n) / float64(s.window)
	}
	walked := s.window
	for {
		n := float64(len(ids))
		pLow, pHigh := max(n, 0.5)/float64(walked), (n+2)/float64(walked)
		walkOn := float64(k-len(ids)) / pLow
		if walkOn > noteGinCost*max(pAnd, pHigh)*float64(notes) || float64(walked)+walkOn > float64(s.maxWalk) {
			break
		}
		rows := min(s.maxWalk-walked, s.stretch(min(walked, int(1.5*walkOn))))
		more, last, c, err := s.walkNotes(ctx, f, stop, rows, k-len(ids))
		if err != nil {
			return nil, err
		}
		walked += rows
		ids, stop, cut = append(ids, more...), last, c
		if len(ids) >= k || !cut {
			return ids, nil
		}
	}
	// The GIN index finds every match, in a transaction that allows only bitmap scans (the
	// planner would walk the primary key newest first for a rare word, and read every note).
	var out []int64
	err = pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, sqlBitmapOnly); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `
SELECT m.id FROM channel_memory m
WHERE m.tsv @@ `+tsQuery+` AND `+f.where()+` AND `+sqlNotForgotten+`
ORDER BY m.id DESC LIMIT `+strconv.Itoa(k), f.args...)
		if err != nil {
			return err
		}
		out, err = pgx.CollectRows(rows, pgx.RowTo[int64])
		return err
	})
	return out, err
}

// walkNotes reads the `rows` newest notes that pass f (older than note from, when not 0) and
// returns the ids of the first k that match and are not forgotten, newest first; cut when it
// stopped at the rows-th note, which is stop.
func (s *Searcher) walkNotes(ctx context.Context, f *filter, from int64, rows, k int) (ids []int64, stop int64, cut bool, err error) {
	if from != 0 {
		f = &filter{conds: slices.Clone(f.conds), args: slices.Clone(f.args)}
		f.add("m.id < ?", from)
	}
	last := strconv.Itoa(rows)
	args := append(slices.Clone(f.args), k) // k bound, rows in the text: see walk
	r, err := s.pool.Query(ctx, `
SELECT id, m, n = `+last+` FROM (
    SELECT id, m, row_number() OVER (ORDER BY id DESC) AS n
    FROM (
        SELECT m.id, m.tsv @@ `+tsQuery+` AND `+sqlNotForgotten+` AS m FROM channel_memory m
        WHERE `+f.where()+`
        ORDER BY m.id DESC LIMIT `+last+`
    ) d
) w
WHERE m OR n = `+last+`
ORDER BY id DESC LIMIT $`+strconv.Itoa(len(args)), args...)
	if err != nil {
		return nil, 0, false, err
	}
	defer r.Close()
	for r.Next() {
		var id int64
		var match, isLast bool
		if err := r.Scan(&id, &match, &isLast); err != nil {
			return nil, 0, false, err
		}
		if match {
			ids = append(ids, id)
		}
		if isLast {
			cut, stop = true, id
		}
	}
	if err := r.Err(); err != nil {
		return nil, 0, false, err
	}
	if len(ids) > k { // the last note matched beyond k: it was only the stop
		ids = ids[:k]
	}
	return ids, stop, cut, nil
}

// sqlRankNotes ranks the candidate notes $2 by relevance blended with recency, as messages
// are, and shows each whole, its matches marked. $3 now, $4 the half-life (seconds), $5 the
// headline options, $6 the limit.
const sqlRankNotes = `
WITH q AS (SELECT ` + tsQuery + ` AS q),
r AS (
    SELECT m.id, m.channel, m.thread_ts, m.by_kind, m.by_id, m.session_id, m.created_at, m.text,
           ts_rank_cd(m.tsv, q.q, 32)
             * (1 + power(2, -greatest(extract(epoch FROM $3::timestamptz - m.created_at), 0) / $4))
             AS score
    FROM unnest($2::bigint[]) AS c(id)
    JOIN channel_memory m ON m.id = c.id
    CROSS JOIN q
    ORDER BY score DESC, m.created_at DESC, m.id DESC
    LIMIT $6
)
SELECT r.id, r.channel, r.thread_ts, r.by_kind, r.by_id, r.session_id, r.created_at, r.score,
       coalesce((SELECT d.actor_name FROM search_docs d WHERE d.actor_id = r.by_id AND d.actor_name <> ''
                 ORDER BY d.created_at DESC LIMIT 1), ''),
       coalesce((SELECT s.title FROM search_sessions s WHERE s.session_id = r.session_id), ''),
       ts_headline('english', r.text, q.q, $5)
FROM r CROSS JOIN q
ORDER BY r.score DESC, r.created_at DESC, r.id DESC`

func (s *Searcher) rankNotes(ctx context.Context, q Query, ids []int64) ([]Hit, error) {
	rows, err := s.pool.Query(ctx, sqlRankNotes, q.Text, ids, s.now(), s.halfLife.Seconds(), headlineShort, q.Limit)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (Hit, error) {
		h := Hit{Kind: HitNote}
		var byKind, snippet string
		var sid *session.ID
		err := row.Scan(&h.NoteID, &h.Channel, &h.ThreadTS, &byKind, &h.ActorID, &sid, &h.CreatedAt, &h.Score,
			&h.ActorName, &h.Title, &snippet)
		h.ActorKind = string(session.ActorUser)
		if byKind == session.NoteByAgent {
			h.ActorKind = string(session.ActorBot)
		}
		if sid != nil {
			h.SessionID = *sid
		}
		h.Snippet = spans(snippet)
		h.Permalink = s.Permalink(h.Channel, h.ThreadTS, "")
		return h, err
	})
}

// messagesAndNotes are the best hits among messages and notes together (KindAll): the best
// of each, merged by score. When the messages' page is cut (More), the messages that make
// the merged page are the most recent of it, not the best, so that More goes on right after
// them: every message is then on one page, once.
func (s *Searcher) messagesAndNotes(ctx context.Context, q Query, t table) (Page, error) {
	// The two searches are independent: each on a connection of its own, at once.
	var msgs messagePage
	var notes []Hit
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() (err error) { msgs, err = s.messages(gctx, q, t); return err })
	g.Go(func() (err error) { notes, err = s.notes(gctx, q); return err })
	if err := g.Wait(); err != nil {
		return Page{}, err
	}
	byScore := func(hits []Hit) []Hit {
		slices.SortStableFunc(hits, func(a, b Hit) int {
			return cmp.Or(cmp.Compare(b.Score, a.Score), b.CreatedAt.Compare(a.CreatedAt))
		})
		return hits[:min(len(hits), q.Limit)]
	}
	hits := byScore(append(slices.Clone(msgs.hits), notes...))
	if msgs.more == "" {
		return Page{Hits: hits}, nil
	}
	kept := 0 // how many messages the merge keeps; which ones is time's choice
	for _, h := range hits {
		if h.Kind != HitNote {
			kept++
		}
	}
	if kept == len(msgs.keys) {
		return Page{Hits: hits, More: msgs.more}, nil
	}
	newest := map[docKey]bool{}
	for _, k := range msgs.keys[:kept] {
		newest[docKey{id: k.id, seq: k.seq}] = true
	}
	var out []Hit // the notes the merge chose, and the newest `kept` messages
	for _, h := range hits {
		if h.Kind == HitNote {
			out = append(out, h)
		}
	}
	for _, h := range msgs.hits {
		if newest[docKey{id: h.SessionID, seq: h.Seq}] {
			out = append(out, h)
		}
	}
	more := msgs.keys[0].above().cursor() // no message kept: the next page starts with the newest
	if kept > 0 {
		more = msgs.keys[kept-1].cursor()
	}
	return Page{Hits: byScore(out), More: more}, nil
}
