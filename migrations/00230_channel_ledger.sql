-- A ledger per channel (issue 49): every change that shapes what the agent does in a channel
-- is an event of that channel's ledger, a stream of the log like a thread's session.
--
--   * A channel's ledger is a session row with thread_ts 'ledger' (no Slack ts looks like it;
--     sessions_thread_once keeps it one per channel). Its events are appended by
--     logbook_append, so they have the log's chain, verification, checkpoints and exports.
--     Types: setting_changed, note_added, note_forgotten, repo_set, budget_raised,
--     schedule_added, schedule_removed, connector_connected, automation_paused,
--     automation_resumed. Each event's idempotency key names its projection row
--     ('setting/<id>', 'note/<id>', 'forgot/<note id>', 'repo/<id>', 'budget/<id>',
--     'schedule/<id>', 'unschedule/<id>', 'connect/<server>/<connected_at in Unix
--     microseconds>', 'pause/<id>'); its payload holds the row's
--     fields (never a token), "at" the row's time, "via" the path of the change.
--   * channel_settings, channel_memory, channel_memory_forgotten, channel_repos,
--     budget_raises, schedules, schedule_removals, mcp_tokens (who connected and when) and
--     automation_pauses (those with a channel)
--     stay as projections for fast reads: the application writes each row and its ledger
--     event in one transaction, and `logbook audit verify` checks every row against its
--     event (session.Store.CheckLedgers).
--   * logbook_ledger(team, channel) returns the channel's ledger session, opening it once.
--   * Retention: a ledger is no thread whose last event ages out: logbook_purge_expired skips
--     it (its settings, repository and budget events are the channel's current state).
--     A memory note is the exception, as it was: logbook_purge_memory empties the payload of
--     a purged note's note_added event with its text (the hash and key stay).
--   * Rows written before this migration get their ledger events here, "at" their own time.

-- +goose Up
-- +goose StatementBegin
CREATE FUNCTION logbook_ledger(p_team text, p_channel text) RETURNS uuid
LANGUAGE plpgsql AS $$
DECLARE
    v uuid;
BEGIN
    SELECT s.id INTO v FROM sessions s WHERE s.channel_id = p_channel AND s.thread_ts = 'ledger' AND s.by_thread;
    IF FOUND THEN
        RETURN v;
    END IF;
    INSERT INTO sessions AS s (id, team_id, channel_id, thread_ts)
    VALUES (gen_random_uuid(),
            coalesce(nullif(p_team, ''),
                     (SELECT o.team_id FROM sessions o WHERE o.channel_id = p_channel ORDER BY o.created_at LIMIT 1),
                     '-'),
            p_channel, 'ledger')
    ON CONFLICT DO NOTHING
    RETURNING s.id INTO v;
    IF v IS NULL THEN -- another transaction opened it meanwhile
        SELECT s.id INTO v FROM sessions s WHERE s.channel_id = p_channel AND s.thread_ts = 'ledger' AND s.by_thread;
    END IF;
    RETURN v;
END
$$;
-- +goose StatementEnd

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
         WHERE s.thread_ts <> 'ledger' -- a channel's ledger is its current configuration (00210)
           AND EXISTS (SELECT 1 FROM events e WHERE e.session_id = s.id AND e.payload IS NOT NULL)
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
        -- The session's files: content no other session references goes with it (a bucket's
        -- copy is marked, and deleted by the retention run that called this).
        UPDATE file_blobs b SET purged_at = clock_timestamp()
         WHERE b.purged_at IS NULL
           AND b.sha256 IN (SELECT r.sha256 FROM file_refs r WHERE r.session_id = v_sid)
           AND NOT EXISTS (SELECT 1 FROM file_refs o WHERE o.sha256 = b.sha256 AND o.session_id <> v_sid);
        DELETE FROM file_refs r WHERE r.session_id = v_sid;
        DELETE FROM file_blobs b
         WHERE NOT b.in_bucket AND b.purged_at IS NOT NULL
           AND NOT EXISTS (SELECT 1 FROM file_refs o WHERE o.sha256 = b.sha256);
        -- A session that shared the same content while this ran (its reference committed
        -- after the mark above) keeps it readable.
        UPDATE file_blobs b SET purged_at = NULL
         WHERE b.purged_at IS NOT NULL AND EXISTS (SELECT 1 FROM file_refs o WHERE o.sha256 = b.sha256);
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

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION logbook_purge_memory(p_cutoff timestamptz) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public AS $$
DECLARE
    v_n bigint;
BEGIN
    IF p_cutoff IS NULL OR p_cutoff > clock_timestamp() THEN
        RAISE EXCEPTION 'logbook: purge cutoff % is in the future', p_cutoff USING ERRCODE = '22023';
    END IF;
    PERFORM pg_advisory_xact_lock(7461002);
    PERFORM set_config('logbook.purge', 'on', true);
    WITH m AS (
        UPDATE channel_memory m SET text = NULL, purged_at = clock_timestamp()
         WHERE m.text IS NOT NULL AND m.created_at < p_cutoff
           AND NOT EXISTS (
               SELECT 1 FROM audit_holds h
                WHERE h.action = 'add'
                  AND NOT EXISTS (SELECT 1 FROM audit_holds r WHERE r.hold_id = h.hold_id AND r.action = 'remove')
                  AND ((h.scope = 'channel' AND h.value = m.channel)
                    OR (h.scope = 'actor' AND h.value = m.by_id)
                    OR (h.scope = 'session' AND h.value = m.session_id::text)))
        RETURNING m.id, m.channel
    ), e AS (
        -- The note's ledger event loses its payload with the text (its hash and key stay).
        UPDATE events e SET payload = NULL
          FROM m, sessions s
         WHERE s.channel_id = m.channel AND s.thread_ts = 'ledger' AND s.by_thread
           AND e.session_id = s.id AND e.idempotency_key = 'note/' || m.id AND e.payload IS NOT NULL
        RETURNING 1
    )
    SELECT count(*) INTO v_n FROM m;
    PERFORM set_config('logbook.purge', 'off', true);
    RETURN v_n;
END
$$;
-- +goose StatementEnd

-- The auditor checks a connector's row against its ledger: who connected it and when, never
-- the sealed token.
GRANT SELECT (server, channel, connected_by, connected_at) ON mcp_tokens TO logbook_auditor;

-- The rows written before the ledger, in the order they were written.
-- +goose StatementBegin
DO $$
DECLARE
    v_row record;
BEGIN
    FOR v_row IN
        SELECT * FROM (
            SELECT c.set_at AS at, c.team, c.channel, 'setting_changed' AS type, 'user' AS kind, c.set_by AS who,
                   'setting/' || c.id AS key,
                   jsonb_build_object('id', c.id, 'team', c.team, 'name', c.name, 'old', c.old_value, 'new', c.value,
                                      'by', c.set_by, 'via', 'slash_command', 'at', c.set_at) AS payload
              FROM channel_settings c
            UNION ALL
            SELECT m.created_at, m.team, m.channel, 'note_added', CASE m.by_kind WHEN 'agent' THEN 'bot' ELSE 'user' END, m.by_id,
                   'note/' || m.id,
                   jsonb_strip_nulls(jsonb_build_object('id', m.id, 'team', m.team, 'text', m.text, 'by_kind', m.by_kind,
                                      'by', m.by_id, 'session', m.session_id, 'thread_ts', m.thread_ts, 'call_id', m.call_id,
                                      'via', CASE m.by_kind WHEN 'agent' THEN 'agent_tool' ELSE 'slash_command' END,
                                      'at', m.created_at))
              FROM channel_memory m
            UNION ALL
            SELECT f.forgotten_at, m.team, m.channel, 'note_forgotten', 'user', f.forgotten_by,
                   'forgot/' || f.note_id,
                   jsonb_build_object('note', f.note_id, 'by', f.forgotten_by, 'via', 'slash_command', 'at', f.forgotten_at)
              FROM channel_memory_forgotten f JOIN channel_memory m ON m.id = f.note_id
            UNION ALL
            SELECT c.set_at, c.team, c.channel, 'repo_set', 'user', c.set_by,
                   'repo/' || c.id,
                   jsonb_build_object('id', c.id, 'team', c.team, 'url', c.url, 'branch', c.branch, 'by', c.set_by,
                                      'via', 'slash_command', 'at', c.set_at)
              FROM channel_repos c
            UNION ALL
            SELECT b.at, '', b.channel, 'budget_raised', 'user', b.raised_by,
                   'budget/' || b.id,
                   jsonb_build_object('id', b.id, 'day', to_char(b.day, 'YYYY-MM-DD'), 'scope', b.scope, 'subject', b.subject,
                                      'amount', b.amount, 'by', b.raised_by, 'via', 'slash_command', 'at', b.at)
              FROM budget_raises b
            UNION ALL
            SELECT sc.added_at, sc.team, sc.channel, 'schedule_added', 'user', sc.added_by,
                   'schedule/' || sc.id,
                   jsonb_build_object('id', sc.id, 'team', sc.team, 'spec', sc.spec, 'prompt', sc.prompt, 'by', sc.added_by,
                                      'via', 'slash_command', 'at', sc.added_at)
              FROM schedules sc
            UNION ALL
            SELECT r.removed_at, sc.team, sc.channel, 'schedule_removed',
                   CASE r.removed_by WHEN 'system' THEN 'system' ELSE 'user' END, r.removed_by,
                   'unschedule/' || r.schedule_id,
                   jsonb_build_object('schedule', r.schedule_id, 'by', r.removed_by, 'reason', r.reason,
                                      'via', CASE r.removed_by WHEN 'system' THEN 'logbook' ELSE 'slash_command' END,
                                      'at', r.removed_at)
              FROM schedule_removals r JOIN schedules sc ON sc.id = r.schedule_id
            UNION ALL
            SELECT t.connected_at, '', t.channel, 'connector_connected', 'user', t.connected_by,
                   'connect/' || t.server || '/' || ((extract(epoch FROM t.connected_at) * 1000000)::bigint)::text,
                   jsonb_build_object('server', t.server, 'by', t.connected_by, 'via', 'web', 'at', t.connected_at)
              FROM mcp_tokens t
            UNION ALL
            SELECT a.at, '', a.channel, 'automation_' || a.action, CASE a.action WHEN 'paused' THEN 'system' ELSE 'user' END, a.actor,
                   'pause/' || a.id,
                   jsonb_strip_nulls(jsonb_build_object('id', a.id, 'kind', a.kind, 'name', a.name, 'by', a.actor,
                                      'reason', nullif(a.reason, ''),
                                      'via', CASE a.action WHEN 'paused' THEN 'logbook' ELSE 'slash_command' END, 'at', a.at))
              FROM automation_pauses a WHERE a.channel <> ''
        ) x ORDER BY x.at
    LOOP
        PERFORM 1 FROM logbook_append(logbook_ledger(v_row.team, v_row.channel), NULL, NULL,
            ARRAY[gen_random_uuid()], ARRAY[v_row.type], ARRAY[v_row.kind], ARRAY[v_row.who], ARRAY[v_row.payload],
            ARRAY[v_row.key], ARRAY[false]);
    END LOOP;
END
$$;
-- +goose StatementEnd

-- +goose Down
-- The ledgers' sessions and events stay (the log is append-only); the functions go back.
REVOKE SELECT (server, channel, connected_by, connected_at) ON mcp_tokens FROM logbook_auditor;
DROP FUNCTION logbook_ledger(text, text);

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION logbook_purge_memory(p_cutoff timestamptz) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public AS $$
DECLARE
    v_n bigint;
BEGIN
    IF p_cutoff IS NULL OR p_cutoff > clock_timestamp() THEN
        RAISE EXCEPTION 'logbook: purge cutoff % is in the future', p_cutoff USING ERRCODE = '22023';
    END IF;
    PERFORM pg_advisory_xact_lock(7461002);
    PERFORM set_config('logbook.purge', 'on', true);
    UPDATE channel_memory m SET text = NULL, purged_at = clock_timestamp()
     WHERE m.text IS NOT NULL AND m.created_at < p_cutoff
       AND NOT EXISTS (
           SELECT 1 FROM audit_holds h
            WHERE h.action = 'add'
              AND NOT EXISTS (SELECT 1 FROM audit_holds r WHERE r.hold_id = h.hold_id AND r.action = 'remove')
              AND ((h.scope = 'channel' AND h.value = m.channel)
                OR (h.scope = 'actor' AND h.value = m.by_id)
                OR (h.scope = 'session' AND h.value = m.session_id::text)));
    GET DIAGNOSTICS v_n = ROW_COUNT;
    PERFORM set_config('logbook.purge', 'off', true);
    RETURN v_n;
END
$$;
-- +goose StatementEnd

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
        -- The session's files: content no other session references goes with it (a bucket's
        -- copy is marked, and deleted by the retention run that called this).
        UPDATE file_blobs b SET purged_at = clock_timestamp()
         WHERE b.purged_at IS NULL
           AND b.sha256 IN (SELECT r.sha256 FROM file_refs r WHERE r.session_id = v_sid)
           AND NOT EXISTS (SELECT 1 FROM file_refs o WHERE o.sha256 = b.sha256 AND o.session_id <> v_sid);
        DELETE FROM file_refs r WHERE r.session_id = v_sid;
        DELETE FROM file_blobs b
         WHERE NOT b.in_bucket AND b.purged_at IS NOT NULL
           AND NOT EXISTS (SELECT 1 FROM file_refs o WHERE o.sha256 = b.sha256);
        -- A session that shared the same content while this ran (its reference committed
        -- after the mark above) keeps it readable.
        UPDATE file_blobs b SET purged_at = NULL
         WHERE b.purged_at IS NOT NULL AND EXISTS (SELECT 1 FROM file_refs o WHERE o.sha256 = b.sha256);
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
