package audit_test

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/logbook/logbook/audit"
	"github.com/logbook/logbook/session"
)

const benchEvents = 1_000_000

// seedBench writes benchEvents events over 1000 sessions by ten actors (10% each) with
// ~150-byte payloads, in one INSERT ... SELECT. Their hashes are not a valid chain (the
// benchmark measures the export, not verification).
func seedBench(b *testing.B, su *pgxpool.Pool) (from, to time.Time) {
	b.Helper()
	ctx := context.Background()
	from = time.Date(2025, 3, 1, 0, 0, 0, 0, time.UTC)
	for _, q := range []string{
		// Secondary indexes are rebuilt after the bulk insert: much faster than maintaining them.
		`DROP INDEX events_tx_position, events_actor_time, events_time`,
		`INSERT INTO sessions (id, team_id, channel_id, thread_ts)
SELECT ('00000000-0000-7000-8000-' || lpad(to_hex(g), 12, '0'))::uuid, 'T0000001', 'C000000' || (g % 10), g::text
FROM generate_series(0, 999) g`,
		`INSERT INTO events (session_id, seq, event_id, type, actor_kind, actor_id, created_at, payload,
                    payload_hash, prev_hash, hash)
SELECT ('00000000-0000-7000-8000-' || lpad(to_hex(g % 1000), 12, '0'))::uuid, g / 1000 + 1, gen_random_uuid(),
       CASE WHEN g % 3 = 0 THEN 'assistant_message' ELSE 'user_message' END, 'user', 'U00000' || lpad((g % 10)::text, 3, '0'),
       $1::timestamptz + g * interval '1 millisecond',
       jsonb_build_object('text', 'message number ' || g || ' with some words, "quotes" and a newline' || chr(10) || repeat('x', 64),
                          'ts', '1740787200.' || lpad(g::text, 6, '0')),
       decode(md5(g::text) || md5(g::text), 'hex'), decode(md5((g - 1)::text) || md5(g::text), 'hex'),
       decode(md5(g::text) || md5((g + 1)::text), 'hex')
FROM generate_series(0, $2::int - 1) g`,
		`CREATE INDEX events_tx_position ON events (tx_id, position)`,
		`CREATE INDEX events_actor_time ON events (actor_kind, actor_id, created_at)`,
		`CREATE INDEX events_time ON events (created_at)`,
		`VACUUM ANALYZE events`, `VACUUM ANALYZE sessions`,
	} {
		var args []any
		if strings.Contains(q, "$2") {
			args = []any{from, benchEvents}
		}
		if _, err := su.Exec(ctx, q, args...); err != nil {
			b.Fatal(err)
		}
	}
	return from, from.Add(benchEvents * time.Millisecond)
}

// peakHeap samples the live heap every millisecond until stop, and returns the peak above
// the heap at start.
func peakHeap() (stop func() uint64) {
	runtime.GC()
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(s)
	base := s[0].Value.Uint64()
	var peak uint64
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(time.Millisecond)
		defer t.Stop()
		for {
			metrics.Read(s)
			if v := s[0].Value.Uint64(); v > peak {
				peak = v
			}
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	})
	return func() uint64 {
		close(done)
		wg.Wait()
		if peak < base {
			return 0
		}
		return peak - base
	}
}

// BenchmarkExport1M exports 1,000,000 events (one actor's 10%, and all) and, in the same
// process, runs COPY (SELECT ...) TO STDOUT of the same query (the export's own SQL, with its
// parameters inlined) into a file as the floor. Each iteration runs both, alternating which
// goes first; the metrics are medians over iterations: events/s and MB/s of both, the
// export/floor ratio of events/s, and the export's peak live heap. Run with:
//
//	go test -run '^$' -bench Export1M -benchtime 3x ./audit/
func BenchmarkExport1M(b *testing.B) {
	f := newFixture(b)
	ctx := context.Background()
	from, to := seedBench(b, f.su)
	store := session.NewStore(f.auditorPool, session.Options{})
	for _, sel := range []struct {
		name   string
		actors []string
		chains bool
	}{{"actor-10pct", []string{"U00000003"}, false}, {"all", nil, false}, {"all+chains", nil, true}} {
		// The main figures leave out the manifest's chain verification (a second read of every
		// exported session, done by session.Store.Verify); all+chains includes it.
		exp := audit.NewExporter(store, f.auditorPool, audit.ExporterOptions{SkipChains: !sel.chains})
		b.Run(sel.name, func(b *testing.B) {
			q := audit.Query{From: from, To: to, Actors: sel.actors}
			probeBucket, err := audit.OpenBucket(ctx, b.TempDir())
			if err != nil {
				b.Fatal(err)
			}
			defer probeBucket.Close()
			// The export's SQL, from a manifest, with the parameters inlined for COPY.
			probe, err := exp.Export(ctx, audit.Query{From: from, To: from.Add(time.Microsecond), Actors: sel.actors}, probeBucket, "")
			if err != nil {
				b.Fatal(err)
			}
			copySQL := "COPY (" + strings.NewReplacer(
				"$1", "'"+from.Format(time.RFC3339Nano)+"'::timestamptz",
				"$2", "'"+to.Format(time.RFC3339Nano)+"'::timestamptz",
				"$3::text[]", "ARRAY['"+strings.Join(sel.actors, "','")+"']::text[]",
			).Replace(probe.Query.SQL) + ") TO STDOUT"
			copyTo := func(w io.Writer) (int64, time.Duration) {
				conn, err := f.auditorPool.Acquire(ctx)
				if err != nil {
					b.Fatal(err)
				}
				defer conn.Release()
				start := time.Now()
				tag, err := conn.Conn().PgConn().CopyTo(ctx, w, copySQL)
				if err != nil {
					b.Fatal(err)
				}
				return tag.RowsAffected(), time.Since(start)
			}
			copyTo(io.Discard) // warm the cache for both

			var copyDurs, expDurs []time.Duration
			var copyBytes, expBytes int64
			var peak uint64
			var events int64
			i := 0
			for b.Loop() {
				dir := b.TempDir()
				bucket, err := audit.OpenBucket(ctx, dir)
				if err != nil {
					b.Fatal(err)
				}
				runCopy := func() {
					out, err := os.Create(filepath.Join(dir, "copy.txt"))
					if err != nil {
						b.Fatal(err)
					}
					rows, d := copyTo(out)
					out.Close()
					copyDurs = append(copyDurs, d)
					copyBytes = fileSize(b, filepath.Join(dir, "copy.txt"))
					if events != 0 && rows != events {
						b.Fatalf("export has %d events, COPY %d rows", events, rows)
					}
					events = rows
				}
				runExport := func() {
					stop := peakHeap()
					start := time.Now()
					m, err := exp.Export(ctx, q, bucket, "export")
					d := time.Since(start)
					peak = max(peak, stop())
					if err != nil {
						b.Fatal(err)
					}
					expDurs = append(expDurs, d)
					expBytes = m.Files[0].Bytes
					if events != 0 && m.Counts.Events != events {
						b.Fatalf("export has %d events, COPY %d rows", m.Counts.Events, events)
					}
					events = m.Counts.Events
				}
				if i%2 == 0 {
					runCopy()
					runExport()
				} else {
					runExport()
					runCopy()
				}
				i++
				bucket.Close()
				os.RemoveAll(dir)
			}
			cd, ed := median(copyDurs), median(expDurs)
			n := float64(events)
			copyRate, expRate := n/cd.Seconds(), n/ed.Seconds()
			b.ReportMetric(n, "events")
			b.ReportMetric(copyRate, "copy-events/s")
			b.ReportMetric(expRate, "export-events/s")
			b.ReportMetric(expRate/copyRate, "export/copy")
			b.ReportMetric(float64(copyBytes)/1e6/cd.Seconds(), "copy-MB/s")
			b.ReportMetric(float64(expBytes)/1e6/ed.Seconds(), "export-MB/s")
			b.ReportMetric(float64(peak)/1e6, "peak-heap-MB")
			b.Logf("%s: %d events; COPY %v (%.1f MB), export %v (%.1f MB), peak live heap +%.1f MB",
				sel.name, events, copyDurs, float64(copyBytes)/1e6, expDurs, float64(expBytes)/1e6, float64(peak)/1e6)
		})
	}
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

func fileSize(b *testing.B, path string) int64 {
	st, err := os.Stat(path)
	if err != nil {
		b.Fatal(err)
	}
	return st.Size()
}
