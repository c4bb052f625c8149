package session_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/logbook/logbook/session"
)

// BenchmarkLog measures, in one run on one database, single-event appends through the API
// against a raw single-row INSERT into an identically shaped table (same columns and indexes,
// no seq/chain/idempotency logic) at 1, 8 and 32 concurrent sessions, and reading a
// 10,000-event session through Events against a raw SELECT of the same rows. Run it with
// -benchtime=1x (bench/session.sh does); figures are reported as metrics and ratios.
func BenchmarkLog(b *testing.B) {
	st, app, dbURL := newStorePool(b, 40)
	ctx := context.Background()
	su, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		b.Fatal(err)
	}
	defer su.Close()
	if _, err := su.Exec(ctx, `CREATE TABLE raw_events (LIKE events INCLUDING DEFAULTS INCLUDING IDENTITY INCLUDING INDEXES INCLUDING CONSTRAINTS);
		GRANT SELECT, INSERT ON raw_events TO logbook_app`); err != nil {
		b.Fatal(err)
	}
	const perWorker = 300
	for range b.N {
		for _, workers := range []int{1, 8, 32} {
			sessions := make([]session.ID, workers)
			for i := range sessions {
				sessions[i] = openSessionTB(b, st, fmt.Sprintf("1700000000.%06d", workers*100+i)).ID
			}
			raw, api := alternate(workers, perWorker, func(w, i int) error {
				return rawInsert(ctx, app, sessions[w], int64(i+1))
			}, func(w, i int) error {
				_, err := st.Append(ctx, sessions[w], msg("benchmark message with a realistic length of text"))
				return err
			})
			b.Logf("append sessions=%-2d  api %7.0f ev/s p50 %6.2fms p99 %6.2fms | raw floor %7.0f ev/s p50 %6.2fms p99 %6.2fms | ratio %.2f",
				workers, api.rate, ms(api.p50), ms(api.p99), raw.rate, ms(raw.p50), ms(raw.p99), api.rate/raw.rate)
			b.ReportMetric(api.rate/raw.rate, fmt.Sprintf("append_ratio_s%d", workers))
			b.ReportMetric(api.rate, fmt.Sprintf("api_ev/s_s%d", workers))
			b.ReportMetric(raw.rate, fmt.Sprintf("raw_ev/s_s%d", workers))
		}

		// Reading a 10,000-event session.
		long := openSessionTB(b, st, "1700000001.000000")
		batch := make([]session.NewEvent, 500)
		for i := range batch {
			batch[i] = msg("a stored message of the long session, with some words in it")
		}
		for range 20 {
			if _, err := st.Append(ctx, long.ID, batch...); err != nil {
				b.Fatal(err)
			}
		}
		var apiTimes, rawTimes []time.Duration
		for range 15 {
			t0 := time.Now()
			rows, err := app.Query(ctx, `SELECT session_id, seq, event_id, type, actor_kind, actor_id, created_at, payload,
				payload_hash, coalesce(idempotency_key, ''), prev_hash, hash, sanitized, position
				FROM events WHERE session_id = $1 ORDER BY seq`, long.ID)
			if err != nil {
				b.Fatal(err)
			}
			n := 0
			for rows.Next() {
				var e session.Event
				var typ, kind string
				if err := rows.Scan(&e.SessionID, &e.Seq, &e.ID, &typ, &kind, &e.Actor.ID, &e.CreatedAt, &e.Payload,
					&e.PayloadHash, &e.IdempotencyKey, &e.PrevHash, &e.Hash, &e.Sanitized, &e.Position); err != nil {
					b.Fatal(err)
				}
				e.Type, e.Actor.Kind = session.Type(typ), session.ActorKind(kind)
				n++
			}
			if rows.Err() != nil || n != 10000 {
				b.Fatalf("raw read: %d rows, %v", n, rows.Err())
			}
			rawTimes = append(rawTimes, time.Since(t0))

			t0 = time.Now()
			evs, err := st.Events(ctx, long.ID, session.Range{})
			if err != nil || len(evs) != 10000 {
				b.Fatalf("api read: %d events, %v", len(evs), err)
			}
			apiTimes = append(apiTimes, time.Since(t0))
		}
		api, raw := median(apiTimes), median(rawTimes)
		b.Logf("read 10,000 events: api %.2fms | raw SELECT %.2fms | ratio %.2f", ms(api), ms(raw), float64(api)/float64(raw))
		b.ReportMetric(float64(api)/float64(raw), "read_ratio")
	}
}

func rawInsert(ctx context.Context, db *pgxpool.Pool, id session.ID, seq int64) error {
	h := make([]byte, 32)
	rand.Read(h)
	_, err := db.Exec(ctx, `INSERT INTO raw_events (session_id, seq, event_id, type, actor_kind, actor_id, created_at,
		payload, payload_hash, idempotency_key, prev_hash, hash, sanitized)
		VALUES ($1, $2, $3, 'user_message', 'user', 'U0000001', clock_timestamp(), $4, $5, NULL, $5, $5, false)`,
		id, seq, uuid.Must(uuid.NewV7()), `{"text":"benchmark message with a realistic length of text"}`, h)
	return err
}

type result struct {
	rate     float64 // operations per second
	p50, p99 time.Duration
}

// alternate measures a and b, perWorker operations each per worker, in six rounds of
// alternating order (a b, b a, a b, ...), and returns each one's combined result. Run one after
// the other, the two met different moments of a machine whose speed drifts (a shared VM's CPU,
// the other benchmark's leftover backends, autovacuum): on a loaded machine the one-session
// ratio moved from 0.55 to 0.73 with the order alone. Interleaved, a drift falls on both.
// i counts on across rounds, so every operation of a worker has its own i.
func alternate(workers, perWorker int, a, b func(w, i int) error) (result, result) {
	const n = 6
	var ra, rb rounds
	per := perWorker / n
	for k := range n {
		from, to := k*per, (k+1)*per
		if k%2 == 0 {
			ra.run(workers, from, to, a)
			rb.run(workers, from, to, b)
		} else {
			rb.run(workers, from, to, b)
			ra.run(workers, from, to, a)
		}
	}
	return ra.result(), rb.result()
}

// rounds gathers the latencies and elapsed time of one kind of operation over several runs.
type rounds struct {
	lat     []time.Duration
	elapsed time.Duration
}

// run runs fn for i in [from, to) on each of workers goroutines.
func (r *rounds) run(workers, from, to int, fn func(w, i int) error) {
	lat := make([][]time.Duration, workers)
	var wg sync.WaitGroup
	start := time.Now()
	for w := range workers {
		wg.Go(func() {
			for i := from; i < to; i++ {
				t0 := time.Now()
				if err := fn(w, i); err != nil {
					panic(err) // benchmark setup failure; surfaces with its stack
				}
				lat[w] = append(lat[w], time.Since(t0))
			}
		})
	}
	wg.Wait()
	r.elapsed += time.Since(start)
	r.lat = append(r.lat, slices.Concat(lat...)...)
}

// result is the throughput over every run and the per-operation latency percentiles.
func (r *rounds) result() result {
	all := slices.Clone(r.lat)
	slices.Sort(all)
	return result{
		rate: float64(len(all)) / r.elapsed.Seconds(),
		p50:  all[len(all)/2],
		p99:  all[len(all)*99/100],
	}
}

func median(d []time.Duration) time.Duration {
	slices.Sort(d)
	return d[len(d)/2]
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// BenchmarkAppend is BenchmarkLog's append, one session, one connection: run it with
// -benchmem for the client's allocations per append, which the load of the machine does not
// change (docs/measurements.md).
func BenchmarkAppend(b *testing.B) {
	st, _, _ := newStorePool(b, 1)
	sess := openSessionTB(b, st, "1700000000.000009")
	ctx := context.Background()
	if _, err := st.Append(ctx, sess.ID, msg("prepares the statement")); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := st.Append(ctx, sess.ID, msg("benchmark message with a realistic length of text")); err != nil {
			b.Fatal(err)
		}
	}
}
