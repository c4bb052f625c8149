-- Places the search projection's newest rows as PostgreSQL's free-space map would in a live
-- database (issue 53, docs/measurements.md "Fourth round"): the newest :n rows are deleted,
-- the table vacuumed (its pages' free space recorded), and the rows inserted again in time
-- order. They land wherever a page has room, not at the end; autovacuum is turned off on the
-- table so the pages stay as they are (not all-visible) while the benchmark runs.
--
--   psql "$LOGBOOK_BENCH_DATABASE_URL" -v n=100000 -f bench/search-fresh-tail.sql
--   LOGBOOK_BENCH_RUNS=10 LOGBOOK_BENCH_FLOOR=off bench/search.sh
--
-- Undo (the seeder's layout, about a minute at ten million events):
--
--   psql "$LOGBOOK_BENCH_DATABASE_URL" -c "CLUSTER search_docs USING search_docs_walk" \
--     -c "ALTER TABLE search_docs RESET (autovacuum_enabled)" -c "VACUUM ANALYZE search_docs"

\set ON_ERROR_STOP on
ALTER TABLE search_docs SET (autovacuum_enabled = false);
CREATE TABLE bench_fresh AS
SELECT session_id, seq, kind, channel_id, thread_ts, ts, actor_kind, actor_id, actor_name, created_at, edited, deleted, body
FROM search_docs ORDER BY created_at DESC, session_id DESC, seq DESC LIMIT :n;
DELETE FROM search_docs d USING bench_fresh f WHERE d.session_id = f.session_id AND d.seq = f.seq;
VACUUM search_docs;
INSERT INTO search_docs (session_id, seq, kind, channel_id, thread_ts, ts, actor_kind, actor_id, actor_name,
                         created_at, edited, deleted, body)
SELECT * FROM bench_fresh ORDER BY created_at;
DROP TABLE bench_fresh;
-- How scattered the newest 30,000 rows are: the heap pages they are on.
SELECT count(DISTINCT (ctid::text::point)[0]) AS pages_of_the_newest_30000
FROM (SELECT ctid FROM search_docs ORDER BY created_at DESC LIMIT 30000) d;
