-- Retention leaves nothing behind: a purge removes a session's content from every table
-- derived from the log, not only from events.
--
-- Before this migration logbook_purge_expired nulled events.payload and nothing else, so the
-- search projection (search_docs.body and its tsvector, actor_name), the session list
-- (search_sessions.title, first_text) kept the purged text: `logbook search`, the web pages
-- and /logbook search went on showing it. The tables derived from the log, and what a purge
-- does to each:
--   search_docs      one row per message, with its text: the session's rows are deleted.
--   search_sessions  title and first_text are emptied; the row (thread, times, message count)
--                    stays, so the session is still listed as "Thread <ts> in #<channel>".
--   search_cursor    a position in the log, no content: untouched.
--   session_work     seqs and times, no content: untouched (the pending state survives a
--                    purge, see 00004).
--   leases           owner names and epochs: untouched.
-- The indexer never brings the text back: it indexes nothing from a purged payload, and the
-- purge takes the indexer's lock (session.LockSearchIndexer, 7461004) before it touches the
-- projection, so a batch that read payloads before the purge has committed its rows by then
-- (and they are deleted), and the next batch reads the log after the purge.
--
-- Not derived from the log, and kept: access_log.query and audit_holds.reason hold what a
-- person typed (evidence of who searched or held what), audit_access.filters the filters of
-- audit commands.

-- +goose Up
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION logbook_purge_expired(p_cutoff timestamptz, p_reason text, p_who text)
RETURNS TABLE (purge_id bigint, purged_session uuid, from_seq bigint, to_seq bigint, purged bigint,
               head_seq bigint, head_hash bytea, last_event_at timestamptz)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public AS $$
#variable_conflict use_column
DECLARE
    v_sid   uuid;
    v_last  timestamptz;
    v_hseq  bigint;
    v_hhash bytea;
    v_n     bigint;
    v_from  bigint;
    v_to    bigint;
BEGIN
    IF coalesce(p_reason, '') = '' OR coalesce(p_who, '') = '' THEN
        RAISE EXCEPTION 'logbook: a purge needs a reason and who runs it' USING ERRCODE = '22023';
    END IF;
    IF p_cutoff IS NULL OR p_cutoff > clock_timestamp() THEN
        RAISE EXCEPTION 'logbook: purge cutoff % is in the future', p_cutoff USING ERRCODE = '22023';
    END IF;
    PERFORM pg_advisory_xact_lock(7461002);
    -- The search indexer's lock: no batch writes the projection between here and commit.
    PERFORM pg_advisory_xact_lock(7461004);
    FOR v_sid IN
        SELECT s.id FROM sessions s
         WHERE EXISTS (SELECT 1 FROM events e WHERE e.session_id = s.id AND e.payload IS NOT NULL)
           AND NOT EXISTS (SELECT 1 FROM events e WHERE e.session_id = s.id AND e.created_at >= p_cutoff)
           AND NOT EXISTS (
               SELECT 1 FROM audit_holds h
                WHERE h.action = 'add'
                  AND NOT EXISTS (SELECT 1 FROM audit_holds r WHERE r.hold_id = h.hold_id AND r.action = 'remove')
                  AND ((h.scope = 'session' AND h.value = s.id::text)
                    OR (h.scope = 'channel' AND h.value = s.channel_id)
                    OR (h.scope = 'actor' AND EXISTS (
                            SELECT 1 FROM events e WHERE e.session_id = s.id AND e.actor_id = h.value))))
         ORDER BY s.created_at, s.id
    LOOP
        PERFORM pg_advisory_xact_lock(hashtextextended(v_sid::text, 7461));
        SELECT e.seq, e.hash, e.created_at INTO v_hseq, v_hhash, v_last
          FROM events e WHERE e.session_id = v_sid ORDER BY e.seq DESC LIMIT 1;
        IF v_last >= p_cutoff THEN
            CONTINUE; -- an append landed after the scan
        END IF;
        PERFORM set_config('logbook.purge', 'on', true);
        WITH u AS (
            UPDATE events e SET payload = NULL
             WHERE e.session_id = v_sid AND e.payload IS NOT NULL
            RETURNING e.seq
        )
        SELECT count(*), min(u.seq), max(u.seq) INTO v_n, v_from, v_to FROM u;
        PERFORM set_config('logbook.purge', 'off', true);
        IF v_n = 0 THEN
            CONTINUE;
        END IF;
        -- Every payload of the session is gone now: so is everything derived from them.
        DELETE FROM search_docs d WHERE d.session_id = v_sid;
        UPDATE search_sessions s SET title = '', first_text = '' WHERE s.session_id = v_sid;
        INSERT INTO audit_purges AS p (session_id, from_seq, to_seq, purged, head_seq, head_hash,
                                       last_event_at, cutoff, reason, who)
        VALUES (v_sid, v_from, v_to, v_n, v_hseq, v_hhash, v_last, p_cutoff, p_reason, p_who)
        RETURNING p.id INTO purge_id;
        purged_session := v_sid; from_seq := v_from; to_seq := v_to; purged := v_n;
        head_seq := v_hseq; head_hash := v_hhash; last_event_at := v_last;
        RETURN NEXT;
    END LOOP;
END
$$;
-- +goose StatementEnd
ALTER FUNCTION logbook_purge_expired(timestamptz, text, text) OWNER TO logbook_retention;
GRANT SELECT, DELETE ON search_docs TO logbook_retention;
GRANT SELECT, UPDATE ON search_sessions TO logbook_retention;

-- Sessions purged before this migration: their projection rows of purged events go too.
DELETE FROM search_docs d USING events e
 WHERE e.session_id = d.session_id AND e.seq = d.seq AND e.payload IS NULL;
UPDATE search_sessions s SET title = ''
 WHERE EXISTS (SELECT 1 FROM audit_purges p WHERE p.session_id = s.session_id)
   AND NOT EXISTS (SELECT 1 FROM events e WHERE e.session_id = s.session_id
                   AND e.type = 'title' AND e.payload IS NOT NULL);
UPDATE search_sessions s SET first_text = coalesce((
    SELECT left(d.body, 200) FROM search_docs d
     WHERE d.session_id = s.session_id AND d.kind = 'user' AND NOT d.deleted
     ORDER BY d.seq LIMIT 1), '')
 WHERE EXISTS (SELECT 1 FROM audit_purges p WHERE p.session_id = s.session_id);

-- +goose Down
REVOKE SELECT, UPDATE ON search_sessions FROM logbook_retention;
REVOKE SELECT, DELETE ON search_docs FROM logbook_retention;
-- (The Down of 00003 drops the function; restoring its first body is not done here.)
