package search

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"

	"github.com/jackc/pgx/v5"

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
// its GIN index on the note's text (channel_memory_text, migration 00220): a note is short
// and a channel's memory small, so no projection is needed, and a note is found the moment it
// is added. Only notes that may be offered are found: a forgotten note (/logbook forget) is
// not, as a deleted message's text is not, and retention's purge empties the text (NULL), so
// a purged note is gone from the index. Auditors read forgotten notes in exports and
// transcripts.

// noteTSV is the indexed expression of channel_memory_text; a query must use it as written
// for the index to serve it.
const noteTSV = `to_tsvector('english'::regconfig, m.text)`

// noteFilter builds the filter of q over channel_memory m; $1 is the query text.
func (q Query) noteFilter() *filter {
	f := &filter{args: []any{q.Text}}
	q.scope(f, columns{channel: "m.channel", byBot: "m.by_kind = 'agent'", actor: "m.by_id", session: "m.session_id", at: "m.created_at"})
	return f
}

// notesSQL ranks the k most recent notes that match (the candidates, as for messages) by
// relevance blended with recency, and shows each whole, its matches marked. Its parameters
// after the filter's: now, half-life (seconds), headline options, limit.
//
// With walk 0, the matches are read through the GIN index alone: g is MATERIALIZED so the
// planner cannot walk the primary key newest first instead, computing every note's tsvector
// until it finds k (a rare word's walk reads the whole table). With walk > 0 only the walk
// newest notes that pass the filters are looked at, their tsvector computed: a common word's
// k newest matches are among them, where the GIN index would read every note holding it (at
// 400,000 notes, 200 ms for "deploy"). A note's tsvector is computed again only for the k
// candidates (ranked) and the hits (their headline). The last column is the number of
// candidates: fewer than k after a walk says the walk was not enough.
func notesSQL(f *filter, k, walk int) string {
	n := len(f.args)
	p := func(i int) string { return "$" + strconv.Itoa(n+i) }
	g := `
    SELECT m.id, m.channel, m.thread_ts, m.by_kind, m.by_id, m.session_id, m.created_at, m.text
    FROM channel_memory m
    WHERE ` + noteTSV + ` @@ ` + tsQuery + ` AND ` + f.where()
	if walk > 0 {
		g = `
    SELECT m.id, m.channel, m.thread_ts, m.by_kind, m.by_id, m.session_id, m.created_at, m.text
    FROM (SELECT m.id, m.channel, m.thread_ts, m.by_kind, m.by_id, m.session_id, m.created_at, m.text
          FROM channel_memory m WHERE ` + f.where() + ` ORDER BY m.id DESC LIMIT ` + strconv.Itoa(walk) + `) m
    WHERE ` + noteTSV + ` @@ ` + tsQuery
	}
	return `
WITH q AS (SELECT ` + tsQuery + ` AS q),
g AS MATERIALIZED (` + g + `
),
c AS (
    SELECT g.* FROM g
    WHERE NOT EXISTS (SELECT 1 FROM channel_memory_forgotten x WHERE x.note_id = g.id)
    ORDER BY g.id DESC LIMIT ` + strconv.Itoa(k) + `
),
r AS (
    SELECT c.*, ts_rank_cd(to_tsvector('english'::regconfig, c.text), q.q, 32)
             * (1 + power(2, -greatest(extract(epoch FROM ` + p(1) + `::timestamptz - c.created_at), 0) / ` + p(2) + `))
             AS score
    FROM c CROSS JOIN q
    ORDER BY score DESC, c.created_at DESC, c.id DESC
    LIMIT ` + p(4) + `
)
SELECT r.id, r.channel, r.thread_ts, r.by_kind, r.by_id, r.session_id, r.created_at, r.score,
       coalesce((SELECT d.actor_name FROM search_docs d WHERE d.actor_id = r.by_id AND d.actor_name <> ''
                 ORDER BY d.created_at DESC LIMIT 1), ''),
       coalesce((SELECT s.title FROM search_sessions s WHERE s.session_id = r.session_id), ''),
       ts_headline('english', r.text, q.q, ` + p(3) + `), (SELECT count(*) FROM c)
FROM r CROSS JOIN q
ORDER BY r.score DESC, r.created_at DESC, r.id DESC`
}

// noteWalk is how many of the newest notes a search looks at before it asks the GIN index.
const noteWalk = 300

// notes are the best channel memory notes for q (Search with KindNotes): the k most recent
// matches among the newest noteWalk notes when there are k of them, else through the index.
func (s *Searcher) notes(ctx context.Context, q Query) ([]Hit, error) {
	k := max(q.Limit, s.candidates)
	hits, found, err := s.notesPlan(ctx, q, k, noteWalk)
	if err == nil && found < int64(k) {
		hits, _, err = s.notesPlan(ctx, q, k, 0)
	}
	if err != nil {
		return nil, fmt.Errorf("search notes for %q: %w", q.Text, err)
	}
	return hits, nil
}

func (s *Searcher) notesPlan(ctx context.Context, q Query, k, walk int) ([]Hit, int64, error) {
	f := q.noteFilter()
	args := append(f.args, s.now(), s.halfLife.Seconds(), headlineShort, q.Limit)
	rows, err := s.pool.Query(ctx, notesSQL(f, k, walk), args...)
	if err != nil {
		return nil, 0, err
	}
	var found int64
	hits, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Hit, error) {
		h := Hit{Kind: HitNote}
		var byKind, snippet string
		var sid *session.ID
		err := row.Scan(&h.NoteID, &h.Channel, &h.ThreadTS, &byKind, &h.ActorID, &sid, &h.CreatedAt, &h.Score,
			&h.ActorName, &h.Title, &snippet, &found)
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
	return hits, found, err
}

// messagesAndNotes are the best hits among messages and notes together (KindAll): the best
// of each, merged by score. When the messages' page is cut (More), the messages that make
// the merged page are the most recent of it, not the best, so that More goes on right after
// them: every message is then on one page, once.
func (s *Searcher) messagesAndNotes(ctx context.Context, q Query, docs int64) (Page, error) {
	msgs, err := s.messages(ctx, q, docs)
	if err != nil {
		return Page{}, err
	}
	notes, err := s.notes(ctx, q)
	if err != nil {
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
