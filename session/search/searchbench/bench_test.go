package searchbench_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/logbook/logbook/migrations/pgtest"
	"github.com/logbook/logbook/session"
	"github.com/logbook/logbook/session/search"
	searchbench "github.com/logbook/logbook/session/search/searchbench"
)

// Configuration (environment, read by the benchmark only):
//
//	LOGBOOK_BENCH_EVENTS    events to seed (default 50000; the figure is 1000000)
//	LOGBOOK_BENCH_SESSIONS  sessions to spread them over (default events/50)
//	LOGBOOK_BENCH_DATABASE_URL  a database to use and keep (seeded when its search_docs is
//	                        empty), so a 1M-event data set is built once; default: a fresh
//	                        throwaway database.
//	LOGBOOK_BENCH_RUNS      timed runs per query and variant (default 15)
//	LOGBOOK_BENCH_NOTES     channel memory notes to seed (default events/25), for the
//	                        "kind all" variant (messages and notes)
//	LOGBOOK_BENCH_SEED_ONLY set: seed LOGBOOK_BENCH_DATABASE_URL and time nothing
//	LOGBOOK_BENCH_FLOOR     "off": do not time the floor query (at ten million events its
//	                        default plan takes seconds for a rare word; ratios are then 0)
//
// Run: LOGBOOK_BENCH_EVENTS=1000000 go test -run '^$' -bench SearchLatency -benchtime 1x ./session/search/searchbench

type benchQuery struct {
	name, text string
}

// queries: common, medium and rare words, phrases, AND, OR and exclusion.
var queries = []benchQuery{
	{"common word", "deploy"},
	{"common word 2", "error"},
	{"common pair", "database timeout"},
	{"medium word", "kafka"},
	{"medium word 2", "rollback"},
	{"medium pair", "postgres replication"},
	{"tail word", "brotli"},
	{"tail pair", "citus pgbouncer"},
	{"rare word", "zeppelin"},
	{"rare word 2", "kerberos"},
	{"very rare word", "hyperloop"},
	{"rare-ish word", "quasar"},
	{"phrase", `"connection refused"`},
	{"rare phrase", `"disk pressure"`},
	{"common phrase", `"deploy error"`},
	{"OR", "redis OR memcached"},
	{"exclusion", "deploy -staging"},
	{"rare OR common", "zeppelin OR kafka"},
	{"three words", "billing invoice payment"},
	{"absent word", "xylophone"},
}

type variant struct {
	name  string
	query func(q search.Query) search.Query
	floor func(text string) (string, []any)
}

const floorBase = `SELECT session_id, seq FROM search_docs
WHERE tsv @@ websearch_to_tsquery('english', $1) AND kind IN ('user', 'assistant')`

func variants(now time.Time) []variant {
	since := now.AddDate(0, -3, 0)
	return []variant{
		{"no filter",
			func(q search.Query) search.Query { return q },
			func(text string) (string, []any) {
				return floorBase + ` ORDER BY created_at DESC LIMIT 20`, []any{text}
			}},
		{"channel+since",
			func(q search.Query) search.Query { q.Channel, q.Since = "C0000007", since; return q },
			func(text string) (string, []any) {
				return floorBase + ` AND channel_id = $2 AND created_at >= $3 ORDER BY created_at DESC LIMIT 20`, []any{text, "C0000007", since}
			}},
		{"actor",
			func(q search.Query) search.Query { q.Actor = "U0000042"; return q },
			func(text string) (string, []any) {
				return floorBase + ` AND actor_id = $2 ORDER BY created_at DESC LIMIT 20`, []any{text, "U0000042"}
			}},
		// Messages and memory notes (logbook search's and the web page's default): against the
		// messages' floor, so its ratio next to "no filter"'s is what the notes cost. This is
		// the CLI's query (20 hits).
		{"kind all",
			func(q search.Query) search.Query { q.Kind = search.KindAll; return q },
			func(text string) (string, []any) {
				return floorBase + ` ORDER BY created_at DESC LIMIT 20`, []any{text}
			}},
		// The web page's query: messages and notes, 21 hits (one more than it shows, room for
		// a hit it hides; it asks again with room for 40 only when it hid some and the page
		// came back full, which this benchmark's public channels never make it do).
		{"web page",
			func(q search.Query) search.Query { q.Kind, q.Limit = search.KindAll, search.DefaultLimit+1; return q },
			func(text string) (string, []any) {
				return floorBase + ` ORDER BY created_at DESC LIMIT 21`, []any{text}
			}},
	}
}

// sqlSeedNotes adds $1 channel memory notes, the text of user messages picked at random.
const sqlSeedNotes = `INSERT INTO channel_memory (team, channel, text, by_kind, by_id, created_at)
SELECT 'T0000001', channel_id, left(body, 2000), 'user', actor_id, created_at FROM search_docs
WHERE kind = 'user' AND body <> '' AND channel_id ~ '^[CG][A-Z0-9]{2,}$' ORDER BY random() LIMIT $1`

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

func pct(ds []time.Duration, p float64) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(p*float64(len(s))+0.5) - 1
	return s[max(0, min(i, len(s)-1))]
}

// ratio is a/b, 0 without a floor.
func ratio(a, b time.Duration) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

func ms(d time.Duration) string { return fmt.Sprintf("%6.2f", float64(d.Microseconds())/1000) }

// BenchmarkSearchLatency seeds a log and reports p50/p95 of Searcher.Search for every query
// in every filter variant, against the bare floor query on the same data, in the same run.
func BenchmarkSearchLatency(b *testing.B) {
	ctx := context.Background()
	events := envInt("LOGBOOK_BENCH_EVENTS", 50000)
	sessions := envInt("LOGBOOK_BENCH_SESSIONS", max(events/50, 1))
	runs := envInt("LOGBOOK_BENCH_RUNS", 15)
	floorOn := os.Getenv("LOGBOOK_BENCH_FLOOR") != "off"

	dbURL := os.Getenv("LOGBOOK_BENCH_DATABASE_URL")
	if dbURL == "" {
		dbURL = pgtest.New(b)
	}
	admin, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		b.Fatal(err)
	}
	defer admin.Close()
	var docs int
	if err := admin.QueryRow(ctx, `SELECT count(*) FROM search_docs`).Scan(&docs); err != nil {
		b.Fatal(err)
	}
	if docs == 0 {
		if err := searchbench.Seed(ctx, admin, events, sessions, benchLog{b}); err != nil {
			b.Fatal(err)
		}
	}
	var notes int
	if err := admin.QueryRow(ctx, `SELECT count(*) FROM channel_memory`).Scan(&notes); err != nil {
		b.Fatal(err)
	}
	if notes == 0 {
		if _, err := admin.Exec(ctx, sqlSeedNotes, envInt("LOGBOOK_BENCH_NOTES", max(events/25, 1))); err != nil {
			b.Fatal(err)
		}
		if _, err := admin.Exec(ctx, `ANALYZE channel_memory`); err != nil {
			b.Fatal(err)
		}
	}
	if os.Getenv("LOGBOOK_BENCH_SEED_ONLY") != "" {
		b.Skip("LOGBOOK_BENCH_SEED_ONLY: seeded, nothing timed")
	}
	var nEvents, nDocs, nSessions int
	if err := admin.QueryRow(ctx, `SELECT (SELECT count(*) FROM events), (SELECT count(*) FROM search_docs), (SELECT count(*) FROM sessions),
		(SELECT count(*) FROM channel_memory)`).Scan(&nEvents, &nDocs, &nSessions, &notes); err != nil {
		b.Fatal(err)
	}
	app, err := session.Connect(ctx, dbURL, session.PoolOptions{Role: "logbook_app", MaxConns: 2})
	if err != nil {
		b.Fatal(err)
	}
	defer app.Close()
	searcher := search.NewSearcher(app, search.Options{WorkspaceDomain: "acme.slack.com",
		Window: envInt("LOGBOOK_BENCH_WINDOW", 0), Candidates: envInt("LOGBOOK_BENCH_CANDIDATES", 0)})

	now := time.Now()
	var out strings.Builder
	fmt.Fprintf(&out, "\n%d events, %d sessions, %d search docs, %d memory notes; %d runs per query; times in ms\n", nEvents, nSessions, nDocs, notes, runs)
	fmt.Fprintf(&out, "%-15s %-18s %6s %6s %6s %6s %6s %5s\n", "variant", "query", "p50", "p95", "floor50", "floor95", "ratio95", "hits")
	var allOurs, allFloor []time.Duration
	worst := 0.0
	b.ResetTimer()
	for b.Loop() {
		for _, v := range variants(now) {
			var vOurs, vFloor []time.Duration
			for _, q := range queries {
				sq := v.query(search.Query{Text: q.text})
				fsql, fargs := v.floor(q.text)
				var ours, floor []time.Duration
				var hits int
				for i := -2; i < runs; i++ { // two warm-up runs
					t := time.Now()
					hs, err := searcher.Search(ctx, sq)
					d := time.Since(t)
					if err != nil {
						b.Fatalf("%s %q: %v", v.name, q.text, err)
					}
					hits = len(hs)
					if !floorOn {
						if i >= 0 {
							ours, floor = append(ours, d), append(floor, 0)
						}
						continue
					}
					t = time.Now()
					rows, err := app.Query(ctx, fsql, fargs...)
					if err != nil {
						b.Fatalf("floor %q: %v", q.text, err)
					}
					for rows.Next() {
					}
					rows.Close()
					if err := rows.Err(); err != nil {
						b.Fatalf("floor %q: %v", q.text, err)
					}
					fd := time.Since(t)
					if i >= 0 {
						ours, floor = append(ours, d), append(floor, fd)
					}
				}
				ratio := ratio(pct(ours, .95), pct(floor, .95))
				fmt.Fprintf(&out, "%-15s %-18s %s %s %s %s %6.2f %5d\n", v.name, q.name, ms(pct(ours, .5)), ms(pct(ours, .95)),
					ms(pct(floor, .5)), ms(pct(floor, .95)), ratio, hits)
				vOurs, vFloor = append(vOurs, ours...), append(vFloor, floor...)
			}
			fmt.Fprintf(&out, "%-15s %-18s %s %s %s %s %6.2f\n", v.name, "ALL", ms(pct(vOurs, .5)), ms(pct(vOurs, .95)),
				ms(pct(vFloor, .5)), ms(pct(vFloor, .95)), ratio(pct(vOurs, .95), pct(vFloor, .95)))
			allOurs, allFloor = append(allOurs, vOurs...), append(allFloor, vFloor...)
			worst = max(worst, ratio(pct(vOurs, .95), pct(vFloor, .95)))
		}
	}
	b.StopTimer()
	fmt.Fprintf(&out, "%-15s %-18s %s %s %s %s %6.2f\n", "ALL", "ALL", ms(pct(allOurs, .5)), ms(pct(allOurs, .95)),
		ms(pct(allFloor, .5)), ms(pct(allFloor, .95)), ratio(pct(allOurs, .95), pct(allFloor, .95)))
	fmt.Print(out.String()) // the table is the report; b.Log truncates it
	b.ReportMetric(float64(pct(allOurs, .5).Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(pct(allOurs, .95).Microseconds())/1000, "p95-ms")
	b.ReportMetric(float64(pct(allFloor, .95).Microseconds())/1000, "floor-p95-ms")
	b.ReportMetric(ratio(pct(allOurs, .95), pct(allFloor, .95)), "p95/floor")
	b.ReportMetric(0, "ns/op")
}

type benchLog struct{ b *testing.B }

func (l benchLog) Write(p []byte) (int, error) {
	l.b.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
