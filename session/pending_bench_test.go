package session_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/logbook/logbook/session"
)

// oldPending is the pending-work poll as bot/runner.go ran it before session_work: the
// baseline. It scans every user_message of the window.
const oldPending = `
WITH recent AS (
    SELECT DISTINCT session_id FROM events
    WHERE type = 'user_message' AND created_at > clock_timestamp() - $1::interval
)
SELECT r.session_id FROM recent r
WHERE (SELECT max(e.seq) FROM events e WHERE e.session_id = r.session_id AND e.type = 'user_message')
    > coalesce((SELECT (e.payload->>'through')::bigint FROM events e
                 WHERE e.session_id = r.session_id AND e.type = 'turn_completed'
                 ORDER BY e.seq DESC LIMIT 1), 0)
  AND NOT EXISTS (SELECT 1 FROM leases l WHERE l.session_id = r.session_id
                  AND l.expires_at > clock_timestamp() AND l.owner <> $2)`

// BenchmarkPending measures the pending-work poll at about 10,000 and 1,000,000 events: the
// old query over events (oldPending) against Store.Pending, alternating, in one run on the
// same data, as the application role. Reported per size: the median ns of each
// (old-ns/op, new-ns/op) and old/new. Each size is seeded in its own database: 28 days of
// threads of 48 events (user message, turn started, reply, turn completed), one after the
// other; at either size 20 threads of the last week end with an unanswered message, half of
// them leased by another replica, and 20 threads before the window too (what the poll finds
// does not grow with the log). Both queries must return the same sessions. -short leaves out the 1M size (its seed
// takes about a minute). Run with:
//
//	go test -run '^$' -bench Pending -benchtime 20x ./session/
func BenchmarkPending(b *testing.B) {
	for _, size := range []struct {
		name   string
		events int
	}{{"10k", 10_000}, {"1M", 1_000_000}} {
		b.Run(size.name, func(b *testing.B) {
			if testing.Short() && size.events > 10_000 {
				b.Skip("-short: the 1M seed takes about a minute")
			}
			st, app, dbURL := newStorePool(b, 2)
			ctx := context.Background()
			start := time.Now()
			n := seedPending(b, dbURL, size.events)
			b.Logf("seeded %d events in %v", n, time.Since(start).Round(time.Millisecond))

			const window, owner = 7 * 24 * time.Hour, "bench"
			old := func() []session.ID {
				rows, err := app.Query(ctx, oldPending, window, owner)
				if err != nil {
					b.Fatal(err)
				}
				ids, err := pgx.CollectRows(rows, pgx.RowTo[session.ID])
				if err != nil {
					b.Fatal(err)
				}
				return ids
			}
			cur := func() []session.ID {
				ids, err := st.Pending(ctx, owner, window)
				if err != nil {
					b.Fatal(err)
				}
				return ids
			}
			key := func(x, y session.ID) int { return slices.Compare(x[:], y[:]) }
			want, got := old(), cur()
			slices.SortFunc(want, key)
			slices.SortFunc(got, key)
			if len(want) == 0 || !slices.Equal(got, want) {
				b.Fatalf("Pending found %d sessions, the old query %d (they must agree, and find some)", len(got), len(want))
			}

			var oldDurs, newDurs []time.Duration
			i := 0
			for b.Loop() {
				runOld := func() { t := time.Now(); old(); oldDurs = append(oldDurs, time.Since(t)) }
				runNew := func() { t := time.Now(); cur(); newDurs = append(newDurs, time.Since(t)) }
				if i%2 == 0 {
					runOld()
					runNew()
				} else {
					runNew()
					runOld()
				}
				i++
			}
			o, c := medianDur(oldDurs), medianDur(newDurs)
			b.ReportMetric(float64(n), "events")
			b.ReportMetric(float64(len(want)), "pending")
			b.ReportMetric(float64(o.Nanoseconds()), "old-ns/op")
			b.ReportMetric(float64(c.Nanoseconds()), "new-ns/op")
			b.ReportMetric(float64(o)/float64(c), "old/new")
		})
	}
}

func medianDur(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

// seedPending writes about events events (threads of 48) into the database at dbURL as its
// superuser, in one transaction, and returns how many it wrote. It inserts rows, not appends
// (triggers off: session_replication_role = replica), so session_work, which logbook_append
// keeps, is then filled in one statement, the backfill of migrations/00004_pending.sql. Hashes are not a
// valid chain: the benchmark reads no chain.
func seedPending(b *testing.B, dbURL string, events int) int {
	b.Helper()
	ctx := context.Background()
	su, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		b.Fatal(err)
	}
	defer su.Close()
	const perThread = 48
	threads := max(events/perThread, 1)
	err = pgx.BeginFunc(ctx, su, func(tx pgx.Tx) error {
		for _, q := range []string{
			`SET LOCAL session_replication_role = replica`,
			// Secondary indexes are rebuilt after the bulk insert: much faster than maintaining them.
			`DROP INDEX events_tx_position, events_actor_time, events_time`,
			`INSERT INTO sessions (id, team_id, channel_id, thread_ts, created_at)
SELECT ('00000000-0000-7000-8000-' || lpad(to_hex(k), 12, '0'))::uuid, 'T0000001', 'C000000' || (k % 10), k::text,
       clock_timestamp() - interval '28 days' + k * (interval '28 days' / $1)
FROM generate_series(0, $1 - 1) k`,
			// Thread k's events are g = k*48 .. k*48+47, seq = g%48 + 1, spread evenly over 28
			// days up to now; seqs 4j+1..4j+4: user message, turn started, reply, turn completed.
			`INSERT INTO events (session_id, seq, event_id, type, actor_kind, actor_id, created_at, payload,
                    payload_hash, prev_hash, hash)
SELECT ('00000000-0000-7000-8000-' || lpad(to_hex(g / 48), 12, '0'))::uuid, g % 48 + 1, gen_random_uuid(),
       (ARRAY['user_message', 'turn_started', 'assistant_message', 'turn_completed'])[g % 4 + 1],
       CASE WHEN g % 4 = 0 THEN 'user' ELSE 'bot' END,
       CASE WHEN g % 4 = 0 THEN 'U00000' || lpad((g % 100)::text, 3, '0') ELSE 'B0000001' END,
       clock_timestamp() - interval '28 days' + g * (interval '28 days' / ($1 * 48)),
       CASE g % 4
           WHEN 0 THEN jsonb_build_object('text', 'message number ' || g || ' with a few words of text ' || repeat('x', 64))
           WHEN 1 THEN jsonb_build_object('through', g % 48 + 0, 'reason', 'message')
           WHEN 2 THEN jsonb_build_object('text', 'the reply to message ' || (g - 2) || ' ' || repeat('y', 64))
           ELSE jsonb_build_object('turn', g % 48 - 1, 'status', 'ok', 'through', g % 48 - 2)
       END,
       decode(md5(g::text) || md5(g::text), 'hex'), decode(md5((g - 1)::text) || md5(g::text), 'hex'),
       decode(md5(g::text) || md5((g + 1)::text), 'hex')
FROM generate_series(0, $1 * 48 - 1) g`,
			// Odd threads among the newest 40 and the oldest 40 end with a message nobody answered,
			// just after their last turn: 20 pending in the window, 20 stale ones before it.
			`INSERT INTO events (session_id, seq, event_id, type, actor_kind, actor_id, created_at, payload,
                    payload_hash, prev_hash, hash)
SELECT ('00000000-0000-7000-8000-' || lpad(to_hex(k), 12, '0'))::uuid, 49, gen_random_uuid(), 'user_message',
       'user', 'U0000001', clock_timestamp() - interval '28 days' + (k * 48 + 47) * (interval '28 days' / ($1 * 48)),
       jsonb_build_object('text', 'one more question'), '\x00', '\x00', '\x00'
FROM generate_series(0, $1 - 1) k WHERE (k >= $1 - 40 OR k < 40) AND k % 2 = 1`,
			// Half of those are leased by another replica: 10 are left to wake.
			`INSERT INTO leases (session_id, owner, epoch, expires_at)
SELECT ('00000000-0000-7000-8000-' || lpad(to_hex(k), 12, '0'))::uuid, 'other', 1, clock_timestamp() + interval '1 hour'
FROM generate_series(0, $1 - 1) k WHERE (k >= $1 - 40 OR k < 40) AND k % 4 = 1`,
			`CREATE INDEX events_tx_position ON events (tx_id, position)`,
			`CREATE INDEX events_actor_time ON events (actor_kind, actor_id, created_at)`,
			`CREATE INDEX events_time ON events (created_at)`,
			// The backfill of migrations/00004_pending.sql, then pending and last_message_hour as
			// their writers keep them (00140).
			`INSERT INTO session_work (session_id, last_message_seq, last_message_at, answered_seq, answered_through)
SELECT e.session_id,
       coalesce(max(e.seq) FILTER (WHERE e.type = 'user_message'), 0),
       max(e.created_at) FILTER (WHERE e.type = 'user_message'),
       coalesce(max(e.seq) FILTER (WHERE e.type = 'turn_completed'), 0),
       coalesce((SELECT logbook_turn_through(t.payload) FROM events t
                  WHERE t.session_id = e.session_id AND t.type = 'turn_completed'
                  ORDER BY t.seq DESC LIMIT 1), 0)
FROM events e
WHERE e.type IN ('user_message', 'turn_completed')
GROUP BY e.session_id`,
			`UPDATE session_work SET pending = last_message_seq > answered_through,
       last_message_hour = date_trunc('hour', last_message_at AT TIME ZONE 'UTC')`,
		} {
			var args []any
			if strings.Contains(q, "$1") {
				args = []any{threads}
			}
			if _, err := tx.Exec(ctx, q, args...); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	for _, q := range []string{`VACUUM ANALYZE events`, `VACUUM ANALYZE sessions`, `VACUUM ANALYZE session_work`, `VACUUM ANALYZE leases`} {
		if _, err := su.Exec(ctx, q); err != nil {
			b.Fatal(err)
		}
	}
	var n int
	if err := su.QueryRow(ctx, `SELECT count(*) FROM events`).Scan(&n); err != nil {
		b.Fatal(err)
	}
	return n
}
