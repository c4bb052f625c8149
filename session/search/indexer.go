package search

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"

	"github.com/logbook/logbook/session"
	"github.com/logbook/logbook/session/clip"
	"github.com/logbook/logbook/session/thread"
)

// MaxBody is the most text of one message that is indexed, in bytes; longer tool output is
// cut (on a rune boundary) before indexing. PostgreSQL's tsvector holds at most 1 MiB.
const MaxBody = 64 << 10

// cursorName names the indexer's row in search_cursor.
const cursorName = "search"

// IndexerOptions configure an Indexer. Zero values take defaults.
type IndexerOptions struct {
	Batch int           // events read per step; default 500
	Poll  time.Duration // how often Run looks for new events; default 2s
	// Fleet is how many replicas run an indexer on the database (default 1). Run then polls
	// as seldom as every Fleet × Poll while other indexers keep the index current (see Run),
	// so the fleet together polls about once a Poll instead of Fleet times (issue 53: every
	// replica's poll is a transaction, and ten replicas indexed ten small batches a Poll).
	Fleet int
}

// Indexer keeps the search projection (search_docs, search_sessions) up to date with the
// log. It reads the log with session.Store.ReadAll, so an event whose transaction commits
// after later ones is still indexed (seqs become visible at COMMIT, not in order), and it writes each batch and its cursor in
// one transaction, so a crash never indexes an event twice or skips one. Several indexers
// (replicas, one-shot CLI commands) may run at once: an advisory lock serialises them.
type Indexer struct {
	store *session.Store
	pool  *pgxpool.Pool
	log   zerolog.Logger
	batch int
	poll  time.Duration
	fleet int

	mu   sync.Mutex
	left *session.Cursor // where this indexer last found or left the cursor; nil before its first step
}

// NewIndexer returns an indexer that reads store's log and writes the projection through
// pool (which needs UPDATE on the projection tables: logbook_app has it).
func NewIndexer(store *session.Store, pool *pgxpool.Pool, log zerolog.Logger, opts IndexerOptions) *Indexer {
	return &Indexer{
		store: store,
		pool:  pool,
		log:   log.With().Str("component", "search_indexer").Logger(),
		batch: cmp.Or(opts.Batch, 500),
		poll:  cmp.Or(opts.Poll, 2*time.Second),
		fleet: max(opts.Fleet, 1),
	}
}

// Run indexes new events every Poll until ctx ends, then returns nil. A failed step is
// logged and retried at the next poll; Run returns an error only if it cannot start. In a
// fleet (IndexerOptions.Fleet above 1) the wait doubles, up to Fleet × Poll, after each poll
// that found another indexer at work (the cursor moved since this one last saw it, or the
// lock held), and halves, down to Poll, after one that did not: while the others index, this
// one mostly stays away; alone (the others stopped), it is back to every Poll within a few.
func (ix *Indexer) Run(ctx context.Context) error {
	wait := ix.poll
	t := time.NewTimer(wait)
	defer t.Stop()
	for {
		_, others, err := ix.catchUp(ctx, false)
		if err != nil && ctx.Err() == nil {
			ix.log.Error().Err(err).Msg("index the log for search")
		}
		wait = ix.nextWait(wait, others)
		t.Reset(wait)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// nextWait is Run's wait after a poll that found other indexers at work (others) or not.
func (ix *Indexer) nextWait(wait time.Duration, others bool) time.Duration {
	if others {
		return min(2*wait, time.Duration(ix.fleet)*ix.poll)
	}
	return max(wait/2, ix.poll)
}

// CatchUp indexes every event that is readable now (see session.Store.ReadAll) and returns
// how many events it read. One-shot commands call it before a query so search is current.
func (ix *Indexer) CatchUp(ctx context.Context) (int, error) {
	n, _, err := ix.catchUp(ctx, true)
	return n, err
}

// catchUp is CatchUp; without wait it returns at once (0, nil) when another indexer holds the
// lock: that one is indexing the same events. Run does not wait: every replica's indexer
// queued on the lock every tick, each holding a connection of its replica's pool meanwhile
// (issue 33: ten replicas spent seconds of database time per message waiting on it).
// others reports that another indexer was at work: it held the lock, or had moved the cursor
// since this one last found or left it.
func (ix *Indexer) catchUp(ctx context.Context, wait bool) (total int, others bool, err error) {
	for {
		n, o, err := ix.step(ctx, wait)
		total += n
		others = others || o
		if err != nil {
			return total, others, err
		}
		if n < ix.batch {
			return total, others, nil
		}
	}
}

// Sync indexes every event committed before it was called, waiting (polling every 20ms) for
// transactions that were still running then to finish, since their events cannot be read
// before. Bound it with ctx: a transaction held open anywhere in the cluster holds it back
// (it returns ctx's error then, having indexed what it could).
func (ix *Indexer) Sync(ctx context.Context) error {
	var target uint64
	if err := ix.pool.QueryRow(ctx, sqlNextXID).Scan(&target); err != nil {
		return fmt.Errorf("index for search: read transaction horizon: %w", err)
	}
	for {
		var xmin uint64
		if err := ix.pool.QueryRow(ctx, sqlOldestRunning).Scan(&xmin); err != nil {
			return fmt.Errorf("index for search: read transaction horizon: %w", err)
		}
		if _, err := ix.CatchUp(ctx); err != nil {
			return err
		}
		// CatchUp read every event of transactions below xmin: all of them have finished.
		if xmin >= target {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("index for search: wait for running transactions: %w", ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

const (
	// Every transaction that committed before this query has an id below the first one.
	sqlNextXID       = `SELECT pg_snapshot_xmax(pg_current_snapshot())::text::numeric::bigint`
	sqlOldestRunning = `SELECT pg_snapshot_xmin(pg_current_snapshot())::text::numeric::bigint`
	sqlReadCursor    = `SELECT tx_id::text, position FROM search_cursor WHERE name = $1`
	sqlUpsertCursor  = `
INSERT INTO search_cursor (name, tx_id, position) VALUES ($1, $2::text::xid8, $3)
ON CONFLICT (name) DO UPDATE SET tx_id = EXCLUDED.tx_id, position = EXCLUDED.position`
	sqlSessionKeys = `SELECT id, team_id, channel_id, thread_ts FROM sessions WHERE id = ANY($1)`

	sqlInsertDoc = `
INSERT INTO search_docs (session_id, seq, kind, channel_id, thread_ts, ts, actor_kind, actor_id,
                         actor_name, created_at, body, edited, deleted)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)
ON CONFLICT (session_id, seq) DO NOTHING`
	// Edits and deletions of messages indexed by an earlier step (the fold of this step's
	// events applies the others before the message is inserted).
	sqlEditDoc = `
UPDATE search_docs SET body = $3, edited = true
WHERE session_id = $1 AND ts = $2 AND kind = 'user' AND NOT deleted`
	sqlDeleteDoc = `
UPDATE search_docs SET body = '', deleted = true
WHERE session_id = $1 AND ts = $2 AND kind = 'user'`
	sqlDeliveredDoc = `
UPDATE search_docs SET ts = $3 WHERE session_id = $1 AND seq = $2 AND kind = 'assistant'`
	sqlUpsertSession = `
INSERT INTO search_sessions AS s (session_id, team_id, channel_id, thread_ts, title, started_at,
                                  last_event_at, messages)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
ON CONFLICT (session_id) DO UPDATE SET
    title         = CASE WHEN EXCLUDED.title <> '' THEN EXCLUDED.title ELSE s.title END,
    started_at    = least(s.started_at, EXCLUDED.started_at),
    last_event_at = CASE WHEN $9::bool THEN greatest(s.last_event_at, EXCLUDED.last_event_at) ELSE s.last_event_at END,
    messages      = s.messages + EXCLUDED.messages`
	// first_text follows edits and deletions: it never shows a deleted message.
	sqlFirstText = `
UPDATE search_sessions s SET first_text = coalesce((
    SELECT CASE WHEN length(d.body) > 200 THEN left(d.body, 199) || '…' ELSE d.body END FROM search_docs d
    WHERE d.session_id = s.session_id AND d.kind = 'user' AND NOT d.deleted
    ORDER BY d.seq LIMIT 1), '')
WHERE s.session_id = $1`
)

type sessionAgg struct {
	key                session.ThreadKey
	title              string
	first, last        time.Time
	messages           int
	touchedUserMessage bool
	hadMessage         bool // the step has a user or assistant message: last is its time
}

// step indexes one batch in one transaction and returns how many events it read; without
// wait, none when another indexer holds the lock. others reports that another indexer held
// the lock or had moved the cursor since this one last found or left it.
func (ix *Indexer) step(ctx context.Context, wait bool) (n int, others bool, err error) {
	tx, err := ix.pool.Begin(ctx)
	if err != nil {
		return 0, false, fmt.Errorf("index for search: begin: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // after Commit it is a no-op

	// The advisory lock assigns no transaction id, so it does not hold back ReadAll.
	if wait {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", session.LockSearchIndexer); err != nil {
			return 0, others, fmt.Errorf("index for search: lock: %w", err)
		}
	} else {
		var got bool
		if err := tx.QueryRow(ctx, "SELECT pg_try_advisory_xact_lock($1)", session.LockSearchIndexer).Scan(&got); err != nil {
			return 0, others, fmt.Errorf("index for search: lock: %w", err)
		}
		if !got {
			return 0, true, nil
		}
	}
	var cur session.Cursor
	var txText string
	switch err := tx.QueryRow(ctx, sqlReadCursor, cursorName).Scan(&txText, &cur.Position); {
	case errors.Is(err, pgx.ErrNoRows):
	case err != nil:
		return 0, others, fmt.Errorf("index for search: read cursor: %w", err)
	default:
		if cur.TxID, err = strconv.ParseUint(txText, 10, 64); err != nil {
			return 0, others, fmt.Errorf("index for search: cursor transaction id %q: %w", txText, err)
		}
	}
	ix.mu.Lock()
	others = ix.left != nil && *ix.left != cur
	ix.mu.Unlock()
	evs, next, err := ix.store.ReadAll(ctx, cur, ix.batch)
	if err != nil {
		return 0, others, fmt.Errorf("index for search: %w", err)
	}
	if len(evs) == 0 {
		ix.leave(cur)
		return 0, others, nil
	}

	aggs := map[session.ID]*sessionAgg{}
	var ids []session.ID
	for _, e := range evs {
		if aggs[e.SessionID] == nil {
			aggs[e.SessionID] = &sessionAgg{first: e.CreatedAt}
			ids = append(ids, e.SessionID)
		}
	}
	rows, err := tx.Query(ctx, sqlSessionKeys, ids)
	if err != nil {
		return 0, others, fmt.Errorf("index for search: read sessions: %w", err)
	}
	for rows.Next() {
		var id session.ID
		var k session.ThreadKey
		if err := rows.Scan(&id, &k.Team, &k.Channel, &k.ThreadTS); err != nil {
			rows.Close()
			return 0, others, fmt.Errorf("index for search: read sessions: %w", err)
		}
		aggs[id].key = k
	}
	if err := rows.Err(); err != nil {
		return 0, others, fmt.Errorf("index for search: read sessions: %w", err)
	}

	bySession := map[session.ID][]session.Event{}
	for _, e := range evs {
		bySession[e.SessionID] = append(bySession[e.SessionID], e)
	}
	b := &pgx.Batch{}
	for _, id := range ids {
		a := aggs[id]
		if a.key.ThreadTS == session.LedgerThread || a.key.Replay() {
			continue // a channel's ledger, an eval record: no thread, nothing of it is searched or listed
		}
		ix.queue(b, bySession[id], a)
		last := a.last
		if !a.hadMessage {
			last = a.first // only for a session seen first without a message; not an update
		}
		b.Queue(sqlUpsertSession, id, a.key.Team, a.key.Channel, a.key.ThreadTS, a.title, a.first, last, a.messages, a.hadMessage)
		if a.touchedUserMessage {
			b.Queue(sqlFirstText, id)
		}
	}
	b.Queue(sqlUpsertCursor, cursorName, strconv.FormatUint(next.TxID, 10), next.Position)
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return 0, others, fmt.Errorf("index for search: write %d events: %w", len(evs), err)
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, others, fmt.Errorf("index for search: commit: %w", err)
	}
	ix.leave(next)
	return len(evs), others, nil
}

// leave notes where this indexer found or left the cursor.
func (ix *Indexer) leave(c session.Cursor) {
	ix.mu.Lock()
	ix.left = &c
	ix.mu.Unlock()
}

// queue adds the projection changes of one session's events in this step to b: it folds them
// (session/thread applies edits and deletions) and writes what the fold holds. Edits and
// deletions of messages indexed by an earlier step are strays of the fold, applied to the
// stored documents. Events whose payload cannot be read are logged and skipped: one bad event
// must not stop search for everyone.
func (ix *Indexer) queue(b *pgx.Batch, evs []session.Event, a *sessionAgg) {
	for _, e := range evs {
		if e.CreatedAt.Before(a.first) {
			a.first = e.CreatedAt
		}
		// Last activity is the last message, not a marker (a cell's eviction, a delivery).
		if (e.Type == session.TypeUserMessage || e.Type == session.TypeAssistantMessage) && e.CreatedAt.After(a.last) {
			a.last, a.hadMessage = e.CreatedAt, true
		}
	}
	skip := func(e session.Event, err error) {
		ix.log.Warn().Err(err).Str("session_id", e.SessionID.String()).Int64("seq", e.Seq).
			Str("type", string(e.Type)).Msg("event not indexed for search: unreadable payload")
	}
	doc := func(e session.Event, kind, ts, actorName, body string, edited, deleted bool) {
		b.Queue(sqlInsertDoc, e.SessionID, e.Seq, kind, a.key.Channel, a.key.ThreadTS, ts,
			string(e.Actor.Kind), e.Actor.ID, actorName, e.CreatedAt, clip.Text(body, MaxBody), edited, deleted)
	}
	th := thread.Fold(evs)
	a.title = th.Title
	for _, it := range th.Items {
		e := it.Event
		switch it.Kind {
		case thread.KindUnreadable:
			if e.Payload != nil { // a purged payload left nothing to index
				skip(e, it.Err)
			}
		case thread.KindUser:
			m := it.Message
			a.touchedUserMessage = true
			switch {
			case !m.Stray:
				a.messages++
				doc(e, "user", m.TS, m.UserName, m.Text, m.Edited, m.Deleted)
			case m.Deleted: // the deleted text (a leaked secret, say) stops being returned by search
				b.Queue(sqlDeleteDoc, e.SessionID, m.TS)
			case m.Edited:
				b.Queue(sqlEditDoc, e.SessionID, m.TS, clip.Text(m.Text, MaxBody))
			}
		case thread.KindAssistant:
			if strings.TrimSpace(it.Assistant.Text) == "" {
				continue
			}
			a.messages++
			doc(e, "assistant", "", "", it.Assistant.Text, false, false)
		case thread.KindTool:
			if c := it.Tool.Call; c != nil {
				doc(e, "tool", "", "", c.Name+" "+compactJSON(c.Input), false, false)
			}
			if r := it.Tool.Result; r != nil && r.Content != "" {
				doc(it.Tool.ResultEvent, "tool", "", "", r.Content, false, false)
			}
		case thread.KindMarker:
			if e.Type != session.TypeDelivered || e.Payload == nil {
				continue
			}
			var m session.Delivered
			if err := e.Decode(&m); err != nil {
				skip(e, err)
				continue
			}
			if len(m.TS) > 0 {
				b.Queue(sqlDeliveredDoc, e.SessionID, m.Seq, m.TS[0])
			}
		}
	}
}

func compactJSON(raw json.RawMessage) string {
	var v any
	if len(raw) == 0 || json.Unmarshal(raw, &v) != nil {
		return string(raw)
	}
	// Index the values, not the JSON punctuation: "cmd: kubectl rollout" reads better.
	var parts []string
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			for _, k := range slices.Sorted(maps.Keys(v)) {
				parts = append(parts, k)
				walk(v[k])
			}
		case []any:
			for _, x := range v {
				walk(x)
			}
		case string:
			parts = append(parts, v)
		case nil:
		default:
			parts = append(parts, fmt.Sprint(v))
		}
	}
	walk(v)
	return strings.Join(parts, " ")
}
