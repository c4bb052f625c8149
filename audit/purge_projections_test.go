package audit_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/rs/zerolog"

	"github.com/logbook/logbook/audit"
	"github.com/logbook/logbook/session"
	"github.com/logbook/logbook/session/filestore"
	"github.com/logbook/logbook/session/search"
)

// column is one column of a table that can hold text: text-like, json, jsonb, bytea,
// tsvector, or an array of those.
type column struct {
	schema, table, name, typ string
}

// textColumns lists every column that can hold text, of every table of every schema but the
// system's, from pg_catalog (so a table added by a later migration is searched too).
func textColumns(t *testing.T, db interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}) []column {
	t.Helper()
	const q = `
SELECT n.nspname, c.relname, a.attname, format_type(a.atttypid, a.atttypmod)
FROM pg_attribute a
JOIN pg_class c ON c.oid = a.attrelid
JOIN pg_namespace n ON n.oid = c.relnamespace
JOIN pg_type ty ON ty.oid = a.atttypid
LEFT JOIN pg_type el ON el.oid = ty.typelem AND ty.typcategory = 'A'
WHERE c.relkind IN ('r', 'p', 'm') AND a.attnum > 0 AND NOT a.attisdropped
  AND n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname NOT LIKE 'pg_toast%'
  AND (ty.typcategory = 'S' OR ty.typname IN ('json', 'jsonb', 'bytea', 'tsvector')
       OR el.typcategory = 'S' OR el.typname IN ('json', 'jsonb', 'bytea', 'tsvector'))
ORDER BY 1, 2, a.attnum`
	rows, err := db.Query(context.Background(), q)
	if err != nil {
		t.Fatal(err)
	}
	cols, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (column, error) {
		var c column
		return c, r.Scan(&c.schema, &c.table, &c.name, &c.typ)
	})
	if err != nil {
		t.Fatal(err)
	}
	return cols
}

// holding returns "schema.table.column" of every column in which phrase (case-insensitive)
// or, in a tsvector, lexeme occurs: bytea is read as escaped text, tsvectors by their lexemes.
func holding(t *testing.T, db interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
	QueryRow(context.Context, string, ...any) pgx.Row
}, phrase, lexeme string) []string {
	t.Helper()
	var found []string
	for _, c := range textColumns(t, db) {
		ref := pgx.Identifier{c.schema, c.table}.Sanitize()
		col := pgx.Identifier{c.name}.Sanitize()
		cond, arg := "", phrase
		switch {
		case c.typ == "tsvector":
			cond, arg = fmt.Sprintf(`$1 = ANY(tsvector_to_array(%s))`, col), lexeme
		case c.typ == "tsvector[]":
			cond, arg = fmt.Sprintf(`EXISTS (SELECT 1 FROM unnest(%s) v WHERE $1 = ANY(tsvector_to_array(v)))`, col), lexeme
		case c.typ == "bytea":
			cond = fmt.Sprintf(`encode(%s, 'escape') ILIKE '%%' || $1 || '%%'`, col)
		default: // text-like, json, jsonb, arrays: their text form
			cond = fmt.Sprintf(`%s::text ILIKE '%%' || $1 || '%%'`, col)
		}
		var n int
		if err := db.QueryRow(context.Background(),
			fmt.Sprintf(`SELECT count(*) FROM %s WHERE %s`, ref, cond), arg).Scan(&n); err != nil {
			t.Fatalf("search %s.%s (%s): %v", ref, col, c.typ, err)
		}
		if n > 0 {
			found = append(found, c.schema+"."+c.table+"."+c.name)
		}
	}
	return found
}

// A retention purge leaves nothing behind: after it, the purged words are in no column of
// any table (search projection, titles, snippets, anything derived), search finds nothing
// and the session list shows no title. Found by issue 17: the purge nulled the log's
// payloads and left the projections as they were.
func TestRetentionPurgeLeavesNoTextInAnyTable(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	const word = "Zanzibarquokka" // distinctive: its stem is itself
	var lexeme string
	if err := f.su.QueryRow(ctx, `SELECT (tsvector_to_array(to_tsvector('english', $1)))[1]`, word).Scan(&lexeme); err != nil {
		t.Fatal(err)
	}

	s := f.open(t, "C0000001", "1700000000.000100")
	held := f.open(t, "C00000HC", "1700000000.000200") // a legal hold keeps it whole
	const heldWord = "Heldwombat"
	shas := map[session.ID]string{} // the content of each session's file
	for sess, w := range map[session.Session]string{s: word, held: heldWord} {
		f.append(t, sess.ID, alice, session.TypeUserMessage, session.UserMessage{Team: "T0000001", Channel: sess.Key.Channel,
			ThreadTS: sess.Key.ThreadTS, TS: sess.Key.ThreadTS, User: alice.ID, UserName: "alice",
			Text: "the " + w + " rollout plan", Raw: "the " + w + " rollout plan"})
		f.append(t, sess.ID, botA, session.TypeAssistantMessage, session.AssistantMessage{Text: "checking", ToolCallIDs: []string{"c1"}})
		f.append(t, sess.ID, botA, session.TypeToolCall, session.ToolCall{CallID: "c1", Name: "run_command",
			Input: json.RawMessage(`{"command":"grep -r ` + w + ` ."}`)})
		f.append(t, sess.ID, session.Actor{Kind: session.ActorSandbox, ID: "sandbox"}, session.TypeToolResult,
			session.ToolResult{CallID: "c1", Content: "notes.txt: " + w + " ships friday"})
		f.append(t, sess.ID, botA, session.TypeAssistantMessage, session.AssistantMessage{Text: "The " + w + " rollout ships Friday."})
		f.append(t, sess.ID, botA, session.TypeTitle, session.Title{Text: w + " rollout"})
		// A file shared in the thread, its content stored in the database (file_blobs).
		dump := []byte("core dump: " + w + " ran out of memory\x00\x01")
		sha, err := filestore.NewStore(f.app).Put(ctx, sess.ID, dump)
		if err != nil {
			t.Fatal(err)
		}
		f.append(t, sess.ID, alice, session.TypeFileRef, session.FileRef{FileID: "F1", Name: w + ".dump", Mimetype: "application/octet-stream",
			Size: int64(len(dump)), TS: sess.Key.ThreadTS, User: alice.ID})
		f.append(t, sess.ID, session.Actor{Kind: session.ActorSystem, ID: "files"}, session.TypeFileFetched, session.FileFetched{FileID: "F1",
			TS: sess.Key.ThreadTS, Name: w + ".dump", Mimetype: "application/octet-stream", Size: int64(len(dump)), SHA256: sha, Status: session.FileStored})
		shas[sess.ID] = sha
	}
	if _, err := audit.AddHold(ctx, f.auditorPool, audit.Who{Name: "legal@example.com"}, audit.HoldChannel, "C00000HC", "litigation"); err != nil {
		t.Fatal(err)
	}
	ix := search.NewIndexer(f.app, f.appPool, zerolog.Nop(), search.IndexerOptions{})
	if err := ix.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	searcher := search.NewSearcher(f.appPool, search.Options{})
	hitsIn := func(id session.ID, w string) int {
		t.Helper()
		hits, err := searcher.Search(ctx, search.Query{Text: w, Tools: true, Limit: search.MaxLimit})
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, h := range hits {
			if h.SessionID == id {
				n++
			}
		}
		return n
	}
	titleOf := func(id session.ID) string {
		t.Helper()
		m, err := searcher.Summary(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return m.Title + m.FirstText
	}

	// The positive control: before the purge the word is where the scan must look.
	before := strings.Join(holding(t, f.su, word, lexeme), " ")
	for _, want := range []string{"public.events.payload", "public.search_docs.body", "public.search_docs.tsv",
		"public.search_sessions.title", "public.search_sessions.first_text", "public.file_blobs.content"} {
		if !strings.Contains(before+" ", want+" ") {
			t.Errorf("before the purge, %s does not hold %q (found in: %s): the scan is blind", want, word, before)
		}
	}
	if hitsIn(s.ID, word) == 0 || !strings.Contains(titleOf(s.ID), word) {
		t.Fatalf("before the purge, search and the session list do not show %q", word)
	}
	// The scan reads bytea as text and tsvectors by lexeme: prove it on a table of its own.
	if _, err := f.su.Exec(ctx, `CREATE TABLE scan_control (b bytea, v tsvector, a text[], j json);
		INSERT INTO scan_control VALUES (convert_to('x `+word+` y', 'UTF8'), to_tsvector('english', '`+word+`'),
		ARRAY['`+word+`'], '{"k":"`+word+`"}')`); err != nil {
		t.Fatal(err)
	}
	control := strings.Join(holding(t, f.su, word, lexeme), " ")
	for _, c := range []string{"b", "v", "a", "j"} {
		if !strings.Contains(control+" ", "public.scan_control."+c+" ") {
			t.Errorf("the scan misses scan_control.%s (found in: %s)", c, control)
		}
	}
	if _, err := f.su.Exec(ctx, `DROP TABLE scan_control`); err != nil {
		t.Fatal(err)
	}

	ret, err := audit.NewRetention(f.retention, time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Millisecond) // let the 1ms retention period pass (not a timing assertion)
	ps, err := ret.Purge(ctx, audit.Who{Name: "retention", System: true}, f.dbNow(t))
	if err != nil || len(ps) != 1 || ps[0].Session != s.ID {
		t.Fatalf("purge: %+v, %v; want the unheld session", ps, err)
	}
	// The indexer runs again (as every replica's does): it must not bring the text back.
	if err := ix.Sync(ctx); err != nil {
		t.Fatal(err)
	}

	// The held session keeps everything; the purged one has nothing, anywhere.
	if hitsIn(held.ID, heldWord) == 0 || !strings.Contains(titleOf(held.ID), heldWord) {
		t.Errorf("the held session lost its search entries or title")
	}
	if n := hitsIn(s.ID, word); n != 0 {
		t.Errorf("search still returns %d hits of the purged session", n)
	}
	if got := titleOf(s.ID); got != "" {
		t.Errorf("the purged session's title and snippet are %q, want none", got)
	}
	var purgedPayloads int
	if err := f.su.QueryRow(ctx, `SELECT count(*) FROM events WHERE session_id = $1 AND payload IS NOT NULL`, s.ID).Scan(&purgedPayloads); err != nil || purgedPayloads != 0 {
		t.Fatalf("purged session payloads left: %d, %v", purgedPayloads, err)
	}
	after := holding(t, f.su, word, lexeme)
	if len(after) != 0 {
		t.Errorf("after the purge %q is still in %v", word, after)
	}
	// The purged session's file is gone, content and reference; the held one's stays.
	for id, want := range map[session.ID]int{s.ID: 0, held.ID: 1} {
		var blobs, refs int
		if err := f.su.QueryRow(ctx, `SELECT (SELECT count(*) FROM file_blobs WHERE sha256 = $1),
			(SELECT count(*) FROM file_refs WHERE sha256 = $1)`, shas[id]).Scan(&blobs, &refs); err != nil {
			t.Fatal(err)
		}
		if blobs != want || refs != want {
			t.Errorf("session %s: %d file_blobs and %d file_refs rows of its file after the purge, want %d", id, blobs, refs, want)
		}
	}
	if kept := holding(t, f.su, heldWord, strings.ToLower(heldWord)); len(kept) < 5 {
		t.Errorf("the held session's words are only in %v", kept)
	}
}
