package audit_test

import (
	"context"
	"encoding/csv"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/logbook/logbook/audit"
	"github.com/logbook/logbook/bot/web"
	"github.com/logbook/logbook/session"
	"github.com/logbook/logbook/session/search"
)

var (
	alice = session.Actor{Kind: session.ActorUser, ID: "U00000A1"}
	bob   = session.Actor{Kind: session.ActorUser, ID: "U00000B2"}
	botA  = session.Actor{Kind: session.ActorBot, ID: "B0000001"}
)

func TestExportMatchesAnIndependentQuery(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	s1 := f.open(t, "C0000001", "1700000000.000100")
	s2 := f.open(t, "C0000002", "1700000000.000200")
	s3 := f.open(t, "C0000001", "1700000000.000300")
	var evs []session.Event
	actors := []session.Actor{alice, bob, botA}
	for i := range 30 {
		sid := []session.ID{s1.ID, s2.ID, s3.ID}[i%3]
		a := actors[(i/2)%3]
		typ := session.TypeUserMessage
		if a.Kind == session.ActorBot {
			typ = session.TypeAssistantMessage
		}
		evs = append(evs, f.append(t, sid, a, typ, map[string]any{"text": "message, \"quoted\"\nline " + string(rune('a'+i%26)), "i": i}))
	}
	// Window edges: from is exactly event 5's time (included), to is exactly event 25's (excluded).
	from, to := evs[5].CreatedAt, evs[25].CreatedAt
	exp := audit.NewExporter(f.auditor, f.auditorPool, audit.ExporterOptions{})

	cases := []struct {
		name     string
		q        audit.Query
		wantMore func(t *testing.T, m audit.Manifest)
	}{
		{name: "all actors", q: audit.Query{From: from, To: to}},
		{name: "two actors csv", q: audit.Query{From: from, To: to, Actors: []string{alice.ID, botA.ID}, Format: audit.CSV}},
		{name: "one channel", q: audit.Query{From: from, To: to, Channel: "C0000002"}},
		{name: "whole log", q: audit.Query{From: evs[0].CreatedAt, To: evs[29].CreatedAt.Add(time.Microsecond)}},
		{name: "empty window", q: audit.Query{From: evs[29].CreatedAt.Add(time.Hour), To: evs[29].CreatedAt.Add(2 * time.Hour)},
			wantMore: func(t *testing.T, m audit.Manifest) {
				if m.FirstEventID != "" || len(m.Sessions) != 0 || m.WindowClosed {
					t.Errorf("empty future window: %+v", m)
				}
			}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			bucket, dir := newBucket(t)
			m, err := exp.Export(ctx, tc.q, bucket, "x")
			if err != nil {
				t.Fatal(err)
			}
			want := sqlEventIDs(t, f, tc.q.From, tc.q.To, tc.q.Actors, tc.q.Channel)
			var got []string
			var gotSessions []string
			if tc.q.Format == audit.CSV {
				fh, err := os.Open(filepath.Join(dir, "x", "events.csv"))
				if err != nil {
					t.Fatal(err)
				}
				defer fh.Close()
				recs, err := csv.NewReader(fh).ReadAll()
				if err != nil {
					t.Fatalf("events.csv does not parse as CSV: %v", err)
				}
				col := slices.Index(recs[0], "event_id")
				for _, r := range recs[1:] {
					got = append(got, r[col])
					gotSessions = append(gotSessions, r[slices.Index(recs[0], "session_id")])
					if !strings.Contains(r[slices.Index(recs[0], "payload")], `\"quoted\"`) {
						t.Errorf("payload lost its quotes: %q", r)
					}
				}
			} else {
				for _, e := range jsonlEvents(t, filepath.Join(dir, "x", "events.jsonl")) {
					got = append(got, e["event_id"].(string))
					gotSessions = append(gotSessions, e["session_id"].(string))
				}
			}
			if !slices.Equal(got, want) {
				t.Fatalf("exported event ids (in order):\n%v\nindependent query:\n%v", got, want)
			}
			if m.Counts.Events != int64(len(want)) {
				t.Errorf("manifest counts %d events, want %d", m.Counts.Events, len(want))
			}
			// Counts by type and actor against SQL.
			rows, err := f.su.Query(ctx, `
SELECT e.actor_kind || ':' || e.actor_id, e.type, count(*) FROM events e JOIN sessions s ON s.id = e.session_id
WHERE e.event_id = ANY($1::uuid[]) GROUP BY 1, 2`, want)
			if err != nil {
				t.Fatal(err)
			}
			byActor, byType := map[string]int64{}, map[string]int64{}
			for rows.Next() {
				var a, ty string
				var n int64
				if err := rows.Scan(&a, &ty, &n); err != nil {
					t.Fatal(err)
				}
				byActor[a] += n
				byType[ty] += n
			}
			if !mapsEqual(byActor, m.Counts.ByActor) || !mapsEqual(byType, m.Counts.ByType) {
				t.Errorf("counts by actor %v by type %v; SQL says %v %v", m.Counts.ByActor, m.Counts.ByType, byActor, byType)
			}
			if len(want) > 0 && (m.FirstEventID != want[0] || m.LastEventID != want[len(want)-1]) {
				t.Errorf("first/last event ids %s/%s, want %s/%s", m.FirstEventID, m.LastEventID, want[0], want[len(want)-1])
			}
			slices.Sort(gotSessions)
			gotSessions = slices.Compact(gotSessions)
			if len(m.Sessions) != len(gotSessions) {
				t.Fatalf("manifest lists %d sessions, export has %d", len(m.Sessions), len(gotSessions))
			}
			for i, sc := range m.Sessions {
				head, err := f.app.Head(ctx, uuid.MustParse(sc.SessionID))
				if err != nil {
					t.Fatal(err)
				}
				if sc.SessionID != gotSessions[i] || !sc.ChainOK || sc.HeadSeq != head.Seq {
					t.Errorf("session chain %+v; want ok with head %d", sc, head.Seq)
				}
			}
			if _, err := audit.VerifyExport(ctx, bucket, "x", nil); err != nil {
				t.Fatalf("fresh export does not verify: %v", err)
			}
			if tc.wantMore != nil {
				tc.wantMore(t, m)
			}
		})
	}

	if _, err := exp.Export(ctx, audit.Query{From: to, To: from}, nil, ""); !errors.Is(err, audit.ErrInvalid) {
		t.Errorf("reversed window: %v, want ErrInvalid", err)
	}
}

func mapsEqual(a, b map[string]int64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// An event inserted by a transaction that commits after the export started, with a
// created_at inside the window, is in the export.
func TestExportWaitsForLateCommits(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	s := f.open(t, "C0000001", "1700000000.000100")
	first := f.append(t, s.ID, alice, session.TypeUserMessage, map[string]any{"text": "early"})

	tx, err := f.appPool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	var lateID uuid.UUID
	if err := tx.QueryRow(ctx, `SELECT event_id FROM logbook_append($1, NULL, NULL, ARRAY[$2::uuid], ARRAY['user_message'],
ARRAY['user'], ARRAY['U00000A1'], ARRAY['{"text":"late"}'::jsonb], ARRAY[NULL::text], ARRAY[false])`,
		s.ID, uuid.Must(uuid.NewV7())).Scan(&lateID); err != nil {
		t.Fatal(err)
	}
	to := f.dbNow(t)
	bucket, dir := newBucket(t)
	exp := audit.NewExporter(f.auditor, f.auditorPool, audit.ExporterOptions{})
	done := make(chan error, 1)
	go func() {
		_, err := exp.Export(ctx, audit.Query{From: first.CreatedAt, To: to}, bucket, "")
		done <- err
	}()
	// Wait until the export is waiting for the open transaction, then commit it.
	deadline := time.Now().Add(30 * time.Second)
	for {
		var waiting bool
		if err := f.su.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity
WHERE datname = current_database() AND query LIKE '%audit: wait for writers%' AND pid <> pg_backend_pid())`).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting {
			break
		}
		select {
		case err := <-done:
			t.Fatalf("the export ended (%v) while a transaction that wrote into its window was open", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("the export never started waiting for the open transaction")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range jsonlEvents(t, filepath.Join(dir, "events.jsonl")) {
		got = append(got, e["event_id"].(string))
	}
	want := []string{first.ID.String(), lateID.String()}
	if !slices.Equal(got, want) {
		t.Fatalf("exported %v, want the late commit too: %v", got, want)
	}
}

func TestExportGolden(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	s1 := uuid.MustParse("0195503a-4f00-7000-8000-000000000001")
	s2 := uuid.MustParse("0195503a-4f00-7000-8000-000000000002")
	base := time.Date(2025, 3, 1, 10, 0, 0, 0, time.UTC)
	at := func(min int) time.Time { return base.Add(time.Duration(min) * time.Minute) }
	seedDeterministic(t, f, []seedRow{
		{s1, 1, "0195503a-4f00-7000-9000-000000000001", "user_message", "user", "U00000A1", at(0), `{"text": "hello, \"bot\"\nsecond line", "ts": "1740823200.000100"}`, "T0000001/C0000001/1740823200.000100"},
		{s1, 2, "0195503a-4f00-7000-9000-000000000002", "turn_started", "system", "cell", at(1), `{}`, ""},
		{s2, 1, "0195503a-4f00-7000-9000-000000000003", "user_message", "user", "U00000B2", at(2), `{"text": "café ☕ \u2028 tab\tend"}`, ""},
		{s1, 3, "0195503a-4f00-7000-9000-000000000004", "assistant_message", "bot", "B0000001", at(3), `{"text": "hi"}`, ""},
		{s1, 4, "0195503a-4f00-7000-9000-000000000005", "turn_completed", "system", "cell", at(4), `{}`, ""},
		{s2, 2, "0195503a-4f00-7000-9000-000000000006", "user_message", "user", "U00000A1", at(60), `{"text": "outside the window"}`, ""},
	}, map[session.ID]string{s1: "C0000001", s2: "C0000002"})

	fixed := time.Date(2025, 3, 2, 0, 0, 0, 0, time.UTC)
	exp := audit.NewExporter(f.auditor, f.auditorPool, audit.ExporterOptions{Now: func() time.Time { return fixed }, Version: "test"})
	for _, format := range []audit.Format{audit.JSONL, audit.CSV} {
		bucket, dir := newBucket(t)
		q := audit.Query{From: at(0), To: at(60), Format: format, Zone: "America/Los_Angeles"}
		if _, err := exp.Export(ctx, q, bucket, ""); err != nil {
			t.Fatal(err)
		}
		events, err := os.ReadFile(filepath.Join(dir, "events."+string(format)))
		if err != nil {
			t.Fatal(err)
		}
		golden(t, "events."+string(format), events)
		m := readManifest(t, dir)
		if m.AsOf.Before(fixed) || !m.WindowClosed {
			t.Errorf("as_of %s, window closed %v", m.AsOf, m.WindowClosed)
		}
		// as_of is the database's clock: the one field that is not deterministic.
		raw, err := os.ReadFile(filepath.Join(dir, audit.ManifestName))
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(string(raw), "\n")
		for i, l := range lines {
			if strings.HasPrefix(l, `  "as_of": `) {
				lines[i] = `  "as_of": "(database clock)",`
			}
		}
		golden(t, "manifest."+string(format)+".json", []byte(strings.Join(lines, "\n")))
	}
}

func TestAccessRecordsShowUpInExportsAndFileURLsWork(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	s := f.open(t, "C0000001", "1700000000.000100")
	first := f.append(t, s.ID, alice, session.TypeUserMessage, map[string]any{"text": "x"})
	a, err := audit.RecordAccess(ctx, f.auditorPool, audit.Who{Name: "jane@example.com"}, "verify",
		map[string]any{"session": s.ID})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := audit.RecordAccess(ctx, f.auditorPool, audit.Who{}, "verify", nil); !errors.Is(err, audit.ErrInvalid) {
		t.Errorf("access without who: %v, want ErrInvalid", err)
	}
	dir := t.TempDir()
	bucket, err := audit.OpenBucket(ctx, "file://"+dir+"/nested")
	if err != nil {
		t.Fatal(err)
	}
	defer bucket.Close()
	to := f.dbNow(t)
	m, err := audit.NewExporter(f.auditor, f.auditorPool, audit.ExporterOptions{Settle: time.Millisecond}).Export(ctx,
		audit.Query{From: first.CreatedAt, To: to}, bucket, "")
	if err != nil {
		t.Fatal(err)
	}
	recs := jsonlEvents(t, filepath.Join(dir, "nested", "access.jsonl"))
	if m.AccessRecords != 1 || len(recs) != 1 || recs[0]["id"] != a.ID.String() || recs[0]["who"] != "jane@example.com" ||
		recs[0]["action"] != "verify" || recs[0]["filters"].(map[string]any)["session"] != s.ID.String() {
		t.Fatalf("access records in the export: %v (manifest says %d)", recs, m.AccessRecords)
	}
	entries, _ := os.ReadDir(filepath.Join(dir, "nested"))
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if !slices.Equal(names, []string{"access.jsonl", "automations.jsonl", "budget_raises.jsonl", "events.jsonl", "hook_deliveries.jsonl", "manifest.json", "schedule_ticks.jsonl", "schedules.jsonl", "spend.jsonl", "web_access.jsonl"}) {
		t.Errorf("file:// export wrote %v", names)
	}
	if b, k := audit.SplitObject("file://" + dir + "/cp/1.json"); b != "file://"+dir+"/cp" || k != "1.json" {
		t.Errorf("SplitObject = %q, %q", b, k)
	}
}

// The web pages' access_log (who viewed, searched, downloaded what) is in every export, a
// file of its own, listed, counted and hashed in the manifest like the others; the
// migrations promised it and exports left it out (issue 17).
func TestWebAccessLogIsInExports(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	s := f.open(t, "C0000001", "1700000000.000100")
	first := f.append(t, s.ID, alice, session.TypeUserMessage, map[string]any{"text": "x"})
	pages, err := web.Handler(web.Config{Sessions: f.app, Finder: search.NewSearcher(f.appPool, search.Options{}),
		AccessLog: f.appPool, Access: web.Access{Tokens: []web.Token{{Name: "ci-bot", Secret: "0123456789abcdef-secret"}}}})
	if err != nil {
		t.Fatal(err)
	}
	req := httptest.NewRequest("GET", "/search?q=rollout", nil)
	req.Header.Set("Authorization", "Bearer 0123456789abcdef-secret")
	req.Header.Set("User-Agent", "curl/8")
	rec := httptest.NewRecorder()
	pages.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		t.Fatalf("search page: %d", rec.Code)
	}
	for _, format := range []audit.Format{audit.JSONL, audit.CSV} {
		bucket, dir := newBucket(t)
		m, err := audit.NewExporter(f.auditor, f.auditorPool, audit.ExporterOptions{Settle: time.Millisecond}).Export(ctx,
			audit.Query{From: first.CreatedAt, To: f.dbNow(t), Format: format}, bucket, "")
		if err != nil {
			t.Fatal(err)
		}
		name := "web_access." + string(format)
		var listed *audit.File
		for i := range m.Files {
			if m.Files[i].Name == name {
				listed = &m.Files[i]
			}
		}
		if listed == nil || listed.Records != 1 || m.WebAccessRecords != 1 {
			t.Fatalf("%s: manifest files %+v, web_access_records %d; want %s with 1 record", format, m.Files, m.WebAccessRecords, name)
		}
		raw, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if format == audit.JSONL {
			recs := jsonlEvents(t, filepath.Join(dir, name))
			if len(recs) != 1 || recs[0]["who"] != "ci-bot" || recs[0]["via"] != "bearer_token" || recs[0]["action"] != "search" ||
				recs[0]["query"] != "rollout" || recs[0]["status"] != float64(200) || recs[0]["auditor"] != false ||
				recs[0]["session_id"] != nil || recs[0]["user_agent"] != "curl/8" {
				t.Errorf("web access records: %v", recs)
			}
		} else if lines := strings.Split(strings.TrimSpace(string(raw)), "\n"); len(lines) != 2 ||
			!strings.HasPrefix(lines[0], "id,at,who,via,auditor,action,") || !strings.Contains(lines[1], ",ci-bot,bearer_token,false,search,") {
			t.Errorf("web_access.csv:\n%s", raw)
		}
		if _, err := audit.VerifyExport(ctx, bucket, "", nil); err != nil {
			t.Errorf("%s: verify-export: %v", format, err)
		}
		// The file is protected like the others: a changed byte fails verification.
		if err := os.WriteFile(filepath.Join(dir, name), append(raw, ' '), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := audit.VerifyExport(ctx, bucket, "", nil); !errors.Is(err, audit.ErrTampered) {
			t.Errorf("%s: verify-export of a changed %s: %v, want ErrTampered", format, name, err)
		}
	}
}
