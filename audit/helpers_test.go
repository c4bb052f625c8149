package audit_test

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"
	"gocloud.dev/blob"

	"github.com/logbook/logbook/audit"
	"github.com/logbook/logbook/migrations/pgtest"
	"github.com/logbook/logbook/session"
)

var update = flag.Bool("update", false, "rewrite golden files under testdata")

// fixture is a fresh database with the roles' pools.
type fixture struct {
	url         string
	app         *session.Store // logbook_app: writes events as the bot does
	appPool     *pgxpool.Pool  // app's pool
	auditor     *session.Store // logbook_auditor: what audit commands use
	auditorPool *pgxpool.Pool  // auditor's pool: audit's own tables
	retention   *pgxpool.Pool  // logbook_retention
	su          *pgxpool.Pool  // superuser (the migration owner)
}

func newFixture(t testing.TB) fixture {
	t.Helper()
	dbURL := pgtest.New(t)
	ctx := context.Background()
	open := func(role string) *pgxpool.Pool {
		p, err := session.Connect(ctx, dbURL, session.PoolOptions{Role: role, MaxConns: 8})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.Close)
		return p
	}
	app, auditor := open("logbook_app"), open("logbook_auditor")
	return fixture{
		url:         dbURL,
		app:         session.NewStore(app, session.Options{}),
		appPool:     app,
		auditor:     session.NewStore(auditor, session.Options{}),
		auditorPool: auditor,
		retention:   open("logbook_retention"),
		su:          open(""),
	}
}

func (f fixture) open(t *testing.T, channel, ts string) session.Session {
	t.Helper()
	s, err := f.app.Open(context.Background(), session.ThreadKey{Team: "T0000001", Channel: channel, ThreadTS: ts})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func (f fixture) append(t *testing.T, id session.ID, actor session.Actor, typ session.Type, payload any) session.Event {
	t.Helper()
	evs, err := f.app.Append(context.Background(), id, session.NewEvent{Type: typ, Actor: actor, Payload: payload})
	if err != nil {
		t.Fatal(err)
	}
	return evs[0]
}

func (f fixture) dbNow(t *testing.T) time.Time {
	t.Helper()
	var now time.Time
	if err := f.su.QueryRow(context.Background(), `SELECT clock_timestamp()`).Scan(&now); err != nil {
		t.Fatal(err)
	}
	return now
}

func newBucket(t *testing.T) (*blob.Bucket, string) {
	t.Helper()
	dir := t.TempDir()
	b, err := audit.OpenBucket(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b, dir
}

func testLogger(buf *bytes.Buffer) zerolog.Logger {
	return zerolog.New(buf)
}

// jsonlEvents parses an events.jsonl file.
func jsonlEvents(t *testing.T, path string) []map[string]any {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []map[string]any
	for i, line := range strings.Split(strings.TrimSuffix(string(b), "\n"), "\n") {
		if line == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("line %d of %s is not JSON: %v\n%s", i+1, path, err, line)
		}
		out = append(out, m)
	}
	return out
}

func readManifest(t *testing.T, dir string) audit.Manifest {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, audit.ManifestName))
	if err != nil {
		t.Fatal(err)
	}
	var m audit.Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// golden compares got with testdata/name, or rewrites it with -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read golden file (run with -update to create it): %v", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from the golden file (run go test -update to accept):\n--- got\n%s\n--- want\n%s", name, got, want)
	}
}

// seedRow is a fully determined event for golden files.
type seedRow struct {
	session session.ID
	seq     int64
	id      string
	typ     string
	kind    string
	actor   string
	at      time.Time
	payload string
	key     string
}

// seedDeterministic inserts sessions and events with fixed ids and times, computing a valid
// chain in SQL (the superuser may insert; only changes are refused).
func seedDeterministic(t *testing.T, f fixture, rows []seedRow, channels map[session.ID]string) {
	t.Helper()
	ctx := context.Background()
	for id, ch := range channels {
		if _, err := f.su.Exec(ctx, `INSERT INTO sessions (id, team_id, channel_id, thread_ts, created_at)
VALUES ($1, 'T0000001', $2, '1740823200.000100', '2025-03-01T10:00:00Z')`, id, ch); err != nil {
			t.Fatal(err)
		}
	}
	prev := map[session.ID][]byte{}
	for _, r := range rows {
		p, ok := prev[r.session]
		if !ok {
			p = session.GenesisHash
		}
		var key *string
		if r.key != "" {
			key = &r.key
		}
		var h []byte
		err := f.su.QueryRow(ctx, `
INSERT INTO events (session_id, seq, event_id, type, actor_kind, actor_id, created_at, payload, payload_hash,
                    idempotency_key, prev_hash, hash)
SELECT $1, $2, $3, $4, $5, $6, $7, $8::jsonb, sha256(convert_to($8::jsonb::text, 'UTF8')), $9, $10,
       sha256($10 || logbook_event_header($1, $2, $3, $4, $5, $6, $7, $9) || sha256(convert_to($8::jsonb::text, 'UTF8')))
RETURNING hash`, r.session, r.seq, uuid.MustParse(r.id), r.typ, r.kind, r.actor, r.at, r.payload, key, p).Scan(&h)
		if err != nil {
			t.Fatal(err)
		}
		prev[r.session] = h
	}
}

// sqlEventIDs is the independent query the export is checked against.
func sqlEventIDs(t *testing.T, f fixture, from, to time.Time, actors []string, channel string) []string {
	t.Helper()
	rows, err := f.su.Query(context.Background(), `
SELECT e.event_id::text FROM events e, sessions s
WHERE s.id = e.session_id AND e.created_at >= $1 AND e.created_at < $2
  AND (coalesce(cardinality($3::text[]), 0) = 0 OR e.actor_id IN (SELECT unnest($3::text[])))
  AND ($4 = '' OR s.channel_id = $4)
ORDER BY e.position`, from, to, actors, channel)
	if err != nil {
		t.Fatal(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return ids
}
