-- A fork's history summary holds its parent's words (issue 50): the summarizer takes in the
-- conversation the fork continues, which is the parent's through the fork's seq. Until now a
-- purge of the parent left those words in the fork's context_summary events. Now purging a
-- session also empties the context_summary payloads of every fork below it (forks of forks
-- too), each recorded as an audit_purges row of the fork whose reason names the parent. The
-- events' skeletons and hashes stay, so the forks' chains still verify; a fork's next turn
-- builds its history from its own events, with the retention note for the parent's part.
--
-- The same holds for an eval record (a what-if of a session, 00330): it copies the recorded
-- side of the turn it ran again. Purging a session purges its eval records whole, but for
-- their replay_started link (ids, a hash and the operator's settings), which, like a fork's
-- session_forked, is never purged so the link stays checkable (events_replay_started finds
-- them).

-- +goose Up
CREATE INDEX events_replay_started ON events ((payload->>'original')) WHERE type = 'replay_started';

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
    v_fork  uuid;
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
        WITH RECURSIVE held(id) AS (
            SELECT hs.id FROM sessions hs
             WHERE EXISTS (
               SELECT 1 FROM audit_holds h
                WHERE h.action = 'add'
                  AND NOT EXISTS (SELECT 1 FROM audit_holds r WHERE r.hold_id = h.hold_id AND r.action = 'remove')
                  AND ((h.scope = 'session' AND h.value = hs.id::text)
                    OR (h.scope = 'channel' AND h.value = hs.channel_id)
                    OR (h.scope = 'actor' AND EXISTS (
                            SELECT 1 FROM events e WHERE e.session_id = hs.id AND e.actor_id = h.value))))
          UNION
            -- A held fork holds the parent it continues (and that parent's own parent); a held
            -- eval record the session it ran again.
            SELECT CASE f.type WHEN 'session_forked' THEN (f.payload->>'parent')::uuid
                               ELSE (f.payload->>'original')::uuid END
              FROM events f JOIN held ON f.session_id = held.id
             WHERE f.type IN ('session_forked', 'replay_started') AND f.seq = 1 AND f.payload IS NOT NULL
        )
        SELECT s.id FROM sessions s
         WHERE s.thread_ts <> 'ledger' -- a channel's ledger is its current configuration (00210)
           AND EXISTS (SELECT 1 FROM events e WHERE e.session_id = s.id AND e.payload IS NOT NULL
                                               AND e.type NOT IN ('session_forked', 'replay_started'))
           AND NOT EXISTS (SELECT 1 FROM events e WHERE e.session_id = s.id AND e.created_at >= p_cutoff)
           AND s.id NOT IN (SELECT held.id FROM held)
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
               -- a fork's or an eval record's link: ids and a hash, no one's words
               AND e.type NOT IN ('session_forked', 'replay_started')
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
        -- An eval record of this session (a what-if, `logbook replay --from`) holds its words:
        -- the recorded side of each call and reply. It goes whole with them, but for its link
        -- (replay_started: ids and a hash), which stays checkable.
        FOR v_fork IN
            SELECT r.session_id FROM events r
             WHERE r.type = 'replay_started' AND r.seq = 1 AND r.payload->>'original' = v_sid::text
             ORDER BY r.session_id
        LOOP
            PERFORM pg_advisory_xact_lock(hashtextextended(v_fork::text, 7461));
            PERFORM set_config('logbook.purge', 'on', true);
            WITH u AS (
                UPDATE events e SET payload = NULL
                 WHERE e.session_id = v_fork AND e.payload IS NOT NULL AND e.type <> 'replay_started'
                RETURNING e.seq
            )
            SELECT count(*), min(u.seq), max(u.seq) INTO v_n, v_from, v_to FROM u;
            PERFORM set_config('logbook.purge', 'off', true);
            IF v_n = 0 THEN
                CONTINUE;
            END IF;
            DELETE FROM search_docs d WHERE d.session_id = v_fork;
            -- Its files (the work a what-if's sandbox saved) go as the original's do.
            UPDATE file_blobs b SET purged_at = clock_timestamp()
             WHERE b.purged_at IS NULL
               AND b.sha256 IN (SELECT r.sha256 FROM file_refs r WHERE r.session_id = v_fork)
               AND NOT EXISTS (SELECT 1 FROM file_refs o WHERE o.sha256 = b.sha256 AND o.session_id <> v_fork);
            DELETE FROM file_refs r WHERE r.session_id = v_fork;
            DELETE FROM file_blobs b
             WHERE NOT b.in_bucket AND b.purged_at IS NOT NULL
               AND NOT EXISTS (SELECT 1 FROM file_refs o WHERE o.sha256 = b.sha256);
            SELECT e.seq, e.hash, e.created_at INTO v_hseq, v_hhash, v_last
              FROM events e WHERE e.session_id = v_fork ORDER BY e.seq DESC LIMIT 1;
            INSERT INTO audit_purges AS p (session_id, from_seq, to_seq, purged, head_seq, head_hash,
                                           last_event_at, cutoff, reason, who)
            VALUES (v_fork, v_from, v_to, v_n, v_hseq, v_hhash, v_last, p_cutoff,
                    p_reason || ': an eval record of purged session ' || v_sid::text, p_who)
            RETURNING p.id INTO purge_id;
            purged_session := v_fork; from_seq := v_from; to_seq := v_to; purged := v_n;
            head_seq := v_hseq; head_hash := v_hhash; last_event_at := v_last;
            RETURN NEXT;
        END LOOP;
        -- A fork's summary of its history took this session's words in with it (the
        -- conversation a fork continues is its parent's through the fork's seq): the summaries
        -- go with those words, in every fork below this session at any depth. What the forks
        -- said themselves stays theirs. Recorded as a purge of each fork it touched.
        FOR v_fork IN
            WITH RECURSIVE forks(id) AS (
                SELECT f.session_id FROM events f
                 WHERE f.type = 'session_forked' AND f.seq = 1 AND f.payload->>'parent' = v_sid::text
              UNION
                SELECT f.session_id FROM events f JOIN forks ON f.payload->>'parent' = forks.id::text
                 WHERE f.type = 'session_forked' AND f.seq = 1
            )
            SELECT forks.id FROM forks ORDER BY forks.id
        LOOP
            PERFORM pg_advisory_xact_lock(hashtextextended(v_fork::text, 7461));
            PERFORM set_config('logbook.purge', 'on', true);
            WITH u AS (
                UPDATE events e SET payload = NULL
                 WHERE e.session_id = v_fork AND e.type = 'context_summary' AND e.payload IS NOT NULL
                RETURNING e.seq
            )
            SELECT count(*), min(u.seq), max(u.seq) INTO v_n, v_from, v_to FROM u;
            PERFORM set_config('logbook.purge', 'off', true);
            IF v_n = 0 THEN
                CONTINUE;
            END IF;
            SELECT e.seq, e.hash, e.created_at INTO v_hseq, v_hhash, v_last
              FROM events e WHERE e.session_id = v_fork ORDER BY e.seq DESC LIMIT 1;
            INSERT INTO audit_purges AS p (session_id, from_seq, to_seq, purged, head_seq, head_hash,
                                           last_event_at, cutoff, reason, who)
            VALUES (v_fork, v_from, v_to, v_n, v_hseq, v_hhash, v_last, p_cutoff,
                    p_reason || ': the history summaries of a fork of purged session ' || v_sid::text, p_who)
            RETURNING p.id INTO purge_id;
            purged_session := v_fork; from_seq := v_from; to_seq := v_to; purged := v_n;
            head_seq := v_hseq; head_hash := v_hhash; last_event_at := v_last;
            RETURN NEXT;
        END LOOP;
    END LOOP;
END
$$;
-- +goose StatementEnd

-- +goose Down
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
        WITH RECURSIVE held(id) AS (
            SELECT hs.id FROM sessions hs
             WHERE EXISTS (
               SELECT 1 FROM audit_holds h
                WHERE h.action = 'add'
                  AND NOT EXISTS (SELECT 1 FROM audit_holds r WHERE r.hold_id = h.hold_id AND r.action = 'remove')
                  AND ((h.scope = 'session' AND h.value = hs.id::text)
                    OR (h.scope = 'channel' AND h.value = hs.channel_id)
                    OR (h.scope = 'actor' AND EXISTS (
                            SELECT 1 FROM events e WHERE e.session_id = hs.id AND e.actor_id = h.value))))
          UNION
            -- A held fork holds the parent it continues (and that parent's own parent).
            SELECT (f.payload->>'parent')::uuid FROM events f JOIN held ON f.session_id = held.id
             WHERE f.type = 'session_forked' AND f.seq = 1 AND f.payload IS NOT NULL
        )
        SELECT s.id FROM sessions s
         WHERE s.thread_ts <> 'ledger' -- a channel's ledger is its current configuration (00210)
           AND EXISTS (SELECT 1 FROM events e WHERE e.session_id = s.id AND e.payload IS NOT NULL
                                               AND e.type <> 'session_forked')
           AND NOT EXISTS (SELECT 1 FROM events e WHERE e.session_id = s.id AND e.created_at >= p_cutoff)
           AND s.id NOT IN (SELECT held.id FROM held)
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
               AND e.type <> 'session_forked' -- a fork's reference: ids and a hash, no content
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
DROP INDEX events_replay_started;
