// Package searchbench measures logbook's search against a bare full-text query on a large,
// realistic log, and is run with `go test -bench . ./session/search/searchbench` (see bench_test.go).
//
// Seed fills a database quickly, straight in SQL as a superuser: sessions, events (valid
// chains are not needed for benchmark rows) and the search projection, as the indexer would
// have written it.
package searchbench

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Vocabulary is the benchmark's words, most frequent first: text draws from it with a
// Zipf-like skew, so the first words are in most messages and the last in about 1 in 60.
var Vocabulary = strings.Fields(`
the a to is it of and in on for this that we with be not at from have are was can but
deploy error service database api prod request server user build test log config cluster
pod node version release fix issue check run update query cache job queue timeout team
latency memory cpu disk network traffic alert incident migration schema index table row
kafka consumer producer topic partition offset lag redis postgres mysql replica primary
failover backup restore snapshot volume bucket storage upload download file path permission
token auth login session cookie header proxy gateway ingress load balancer dns certificate
tls ssl expiry renew rotate secret vault key encryption helm chart terraform module state
plan apply drift ci pipeline runner artifact image container docker registry tag push pull
merge branch commit revert rollback hotfix patch review approve ticket sprint oncall pager
dashboard metric grafana prometheus trace span jaeger otel sampling retention quota limit
throttle rate burst spike outage degraded healthy unhealthy probe readiness liveness restart
crash panic exception stack heap leak oom killed evicted scheduled pending running failed
succeeded terminated connection refused reset dial tcp udp port socket handshake certificate
billing invoice payment checkout cart order inventory shipping search recommendation email
notification webhook slack channel thread message reply bot feature flag experiment rollout
canary blue green shadow staging sandbox preview environment region zone availability failover
s3 ec2 lambda cloudfront route53 iam role policy account organization subscription tenant
customer ticket support escalation sla slo error budget postmortem runbook playbook owner
latency p99 p95 histogram percentile regression benchmark profile flamegraph allocation gc
goroutine thread mutex deadlock race condition lock contention retry backoff jitter idempotent
duplicate ordering exactly once delivery acknowledgement offset commit rebalance compaction
vacuum analyze autovacuum bloat wal checkpoint replication slot logical physical standby
sharding partitioning citus pgbouncer pooler connection max statement cancel lock wait
grpc protobuf json yaml schema validation serialization codec compression gzip zstd brotli
frontend backend mobile ios android react typescript webpack bundle css layout render
`)

// Rare words are injected into a few messages each (probability per message).
var Rare = map[string]float64{
	"zeppelin":  0.0001,
	"kerberos":  0.0004,
	"hyperloop": 0.00003,
	"quasar":    0.001,
}

// Phrases are injected whole into some messages, on top of their words' own frequency.
var Phrases = map[string]float64{
	"connection refused": 0.003,
	"disk pressure":      0.0005,
}

// Seed fills the database behind admin (a superuser pool on a migrated database) with
// events across sessions (events/sessions per session, round-robin, one year of activity)
// and the matching search projection. Progress goes to progress.
func Seed(ctx context.Context, admin *pgxpool.Pool, events, sessions int, progress io.Writer) error {
	start := time.Now()
	sd := seeder{admin: admin, progress: progress}
	if err := sd.log(ctx, events, sessions); err != nil {
		return err
	}
	if err := sd.projections(ctx); err != nil {
		return err
	}
	fmt.Fprintf(progress, "seed: %d events, %d sessions in %.1fs\n", events, sessions, time.Since(start).Seconds())
	return nil
}

// seeder runs Seed's steps, each one statement, timed on progress.
type seeder struct {
	admin    *pgxpool.Pool
	progress io.Writer
}

func (sd seeder) step(ctx context.Context, what, sql string, args ...any) error {
	t := time.Now()
	if _, err := sd.admin.Exec(ctx, sql, args...); err != nil {
		return fmt.Errorf("seed: %s: %w", what, err)
	}
	fmt.Fprintf(sd.progress, "seed: %-28s %6.1fs\n", what, time.Since(t).Seconds())
	return nil
}

// log writes the sessions and their events, in chunks.
func (sd seeder) log(ctx context.Context, events, sessions int) error {
	rare := ""
	for w, p := range Rare {
		rare += fmt.Sprintf(" || CASE WHEN random() < %g THEN ' %s' ELSE '' END", p, w)
	}
	for ph, p := range Phrases {
		rare += fmt.Sprintf(" || CASE WHEN random() < %g THEN ' %s' ELSE '' END", p, ph)
	}
	if err := sd.step(ctx, "text function", `
CREATE OR REPLACE FUNCTION bench_text(words text[], n int) RETURNS text LANGUAGE sql VOLATILE AS $$
    SELECT string_agg(words[1 + floor(power(random(), 2.2) * array_length(words, 1))::int], ' ')
    FROM generate_series(1, n)
$$`); err != nil {
		return err
	}
	if err := sd.step(ctx, "session keys", `
CREATE TABLE bench_sessions AS
SELECT i, gen_random_uuid() AS id, 'C' || lpad((i % 40)::text, 7, '0') AS channel_id,
       (1690000000 + i * 1500)::text || '.000100' AS thread_ts
FROM generate_series(0, $1::int - 1) i`, sessions); err != nil {
		return err
	}
	if err := sd.step(ctx, "sessions", `
INSERT INTO sessions (id, team_id, channel_id, thread_ts, created_at)
SELECT id, 'T0000001', channel_id, thread_ts, now() - interval '365 days' + i * (interval '365 days' / $1::int)
FROM bench_sessions`, sessions); err != nil {
		return err
	}
	// The log's secondary indexes are built once after its rows, not maintained per row (at
	// ten million rows, random UUID keys make every row's index insert a cache miss).
	if err := sd.dropIndexes(ctx, "events"); err != nil {
		return err
	}
	const chunk = 250_000
	for lo := 0; lo < events; lo += chunk {
		hi := min(lo+chunk, events)
		err := sd.step(ctx, fmt.Sprintf("events %d-%d", lo, hi-1), `
INSERT INTO events (session_id, seq, event_id, type, actor_kind, actor_id, created_at, payload,
                    payload_hash, prev_hash, hash)
SELECT s.id, g / $4::int + 1, gen_random_uuid(), t.type, t.actor_kind,
       CASE t.actor_kind WHEN 'user' THEN 'U' || lpad((g % 300)::text, 7, '0') WHEN 'bot' THEN 'UB000001' ELSE 'cell' END,
       now() - interval '365 days' + g * (interval '365 days' / $3::int),
       CASE t.type
         WHEN 'user_message' THEN jsonb_build_object('channel', s.channel_id, 'thread_ts', s.thread_ts,
              'ts', (1690000000 + g)::text || '.000200', 'user', 'U' || lpad((g % 300)::text, 7, '0'),
              'user_name', 'user' || (g % 300), 'text', bench_text($5::text[], 6 + (random() * 30)::int) `+rare+`)
         WHEN 'assistant_message' THEN jsonb_build_object('text', bench_text($5::text[], 20 + (random() * 60)::int) `+rare+`)
         WHEN 'tool_result' THEN jsonb_build_object('call_id', 'c' || g, 'content', bench_text($5::text[], 10 + (random() * 40)::int))
         WHEN 'tool_call' THEN jsonb_build_object('call_id', 'c' || g, 'name', 'shell', 'input', jsonb_build_object('cmd', 'kubectl get pods'))
         ELSE '{}'::jsonb
       END,
       '\x00'::bytea, '\x00'::bytea, '\x00'::bytea
FROM generate_series($1::int, $2::int - 1) g
JOIN bench_sessions s ON s.i = g % $4::int
CROSS JOIN LATERAL (SELECT (ARRAY['user_message', 'turn_started', 'tool_call', 'tool_result',
                                  'assistant_message', 'delivered', 'turn_completed'])[(g / $4::int) % 7 + 1] AS type) ty
CROSS JOIN LATERAL (SELECT ty.type, CASE ty.type WHEN 'user_message' THEN 'user'
                           WHEN 'tool_result' THEN 'sandbox' WHEN 'tool_call' THEN 'bot'
                           WHEN 'assistant_message' THEN 'bot' ELSE 'system' END AS actor_kind) t`,
			lo, hi, events, sessions, Vocabulary)
		if err != nil {
			return err
		}
	}
	return sd.createIndexes(ctx, "events")
}

// sqlDropIndexes keeps the definitions of a table's indexes but its primary key in
// bench_indexes, then drops them (unique constraints as constraints).
const sqlDropIndexes = `
CREATE TABLE IF NOT EXISTS bench_indexes (tbl text, name text, def text, constraint_def text);
INSERT INTO bench_indexes
SELECT '%[1]s', i.indexrelid::regclass::text, pg_get_indexdef(i.indexrelid), pg_get_constraintdef(c.oid)
FROM pg_index i LEFT JOIN pg_constraint c ON c.conindid = i.indexrelid AND c.conrelid = i.indrelid
WHERE i.indrelid = '%[1]s'::regclass AND NOT i.indisprimary;
DO $$
DECLARE r record;
BEGIN
    FOR r IN SELECT name, constraint_def FROM bench_indexes WHERE tbl = '%[1]s' LOOP
        IF r.constraint_def IS NULL THEN
            EXECUTE format('DROP INDEX %%I', r.name);
        ELSE
            EXECUTE format('ALTER TABLE %[1]s DROP CONSTRAINT %%I', r.name);
        END IF;
    END LOOP;
END $$`

// sqlCreateIndexes builds again the indexes sqlDropIndexes dropped.
const sqlCreateIndexes = `
SET maintenance_work_mem = '512MB';
DO $$
DECLARE r record;
BEGIN
    FOR r IN SELECT name, def, constraint_def FROM bench_indexes WHERE tbl = '%[1]s' LOOP
        IF r.constraint_def IS NULL THEN
            EXECUTE r.def;
        ELSE
            EXECUTE format('ALTER TABLE %[1]s ADD CONSTRAINT %%I %%s', r.name, r.constraint_def);
        END IF;
    END LOOP;
END $$;
DELETE FROM bench_indexes WHERE tbl = '%[1]s';
RESET maintenance_work_mem`

func (sd seeder) dropIndexes(ctx context.Context, table string) error {
	return sd.step(ctx, "drop indexes of "+table, fmt.Sprintf(sqlDropIndexes, table))
}

func (sd seeder) createIndexes(ctx context.Context, table string) error {
	return sd.step(ctx, "indexes of "+table, fmt.Sprintf(sqlCreateIndexes, table))
}

// projections builds the search projection over the seeded log as the indexer would have
// (search_docs, its GIN index, search_sessions, the cursor), then vacuums and drops the helpers.
func (sd seeder) projections(ctx context.Context) error {
	// Building the indexes (GIN above all) once after the rows is far faster than maintaining
	// them per row. The rows go in in time order, as the indexer writes them (it follows the
	// log): a time walk then reads several rows a heap page, as it does in a real database
	// (written in join order, created_at's correlation with the heap was -0.1, and a walk
	// read a page a row).
	if err := sd.dropIndexes(ctx, "search_docs"); err != nil {
		return err
	}
	if err := sd.step(ctx, "search_docs", `
INSERT INTO search_docs (session_id, seq, kind, channel_id, thread_ts, ts, actor_kind, actor_id,
                         actor_name, created_at, body)
SELECT e.session_id, e.seq,
       CASE e.type WHEN 'user_message' THEN 'user' WHEN 'assistant_message' THEN 'assistant' ELSE 'tool' END,
       s.channel_id, s.thread_ts, coalesce(e.payload->>'ts', ''), e.actor_kind, e.actor_id,
       coalesce(e.payload->>'user_name', ''), e.created_at, coalesce(e.payload->>'text', e.payload->>'content')
FROM events e JOIN sessions s ON s.id = e.session_id
WHERE e.type IN ('user_message', 'assistant_message', 'tool_result')
ORDER BY e.created_at`); err != nil {
		return err
	}
	if err := sd.createIndexes(ctx, "search_docs"); err != nil {
		return err
	}
	if err := sd.step(ctx, "search_sessions", `
INSERT INTO search_sessions (session_id, team_id, channel_id, thread_ts, title, first_text, started_at,
                             last_event_at, messages)
SELECT s.id, s.team_id, s.channel_id, s.thread_ts,
       'Session ' || left(md5(s.id::text), 8), '', min(e.created_at), max(e.created_at),
       count(*) FILTER (WHERE e.type IN ('user_message', 'assistant_message'))
FROM sessions s JOIN events e ON e.session_id = s.id
GROUP BY s.id`); err != nil {
		return err
	}
	if err := sd.step(ctx, "cursor", `
INSERT INTO search_cursor (name, tx_id, position)
SELECT 'search', tx_id, position FROM events ORDER BY tx_id DESC, position DESC LIMIT 1
ON CONFLICT (name) DO UPDATE SET tx_id = EXCLUDED.tx_id, position = EXCLUDED.position`); err != nil {
		return err
	}
	for _, t := range []string{"events", "sessions", "search_docs", "search_sessions"} {
		if err := sd.step(ctx, "vacuum analyze "+t, "VACUUM ANALYZE "+t); err != nil {
			return err
		}
	}
	if err := sd.step(ctx, "drop helpers", `DROP TABLE bench_sessions; DROP TABLE bench_indexes; DROP FUNCTION bench_text(text[], int)`); err != nil {
		return err
	}
	return nil
}
