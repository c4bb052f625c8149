-- Pull requests followed (issue 32): a followup_signal — a failed check, a review asking for
-- changes, the checks gone green, the attempts used up, on a pull request a session opened —
-- is work for the session exactly as a user_message is: logbook_append keeps session_work for
-- it the same way (00060), so the pending poll of any replica finds the session and one cell
-- takes it up, under the session's lease. Nothing else about the append changes.
--
-- followup_subscribed events are found by repository and branch (a webhook names the branch,
-- or the pull request whose branch it is), and followup_ended ones by session: two partial
-- indexes, each over a handful of rows per pull request.
--
-- A signal's actor is the GitHub account that caused it (a webhook's sender): actor kind
-- 'github'. The check is replaced NOT VALID: every stored row passes the old, narrower check,
-- so there is nothing to scan, and new rows are checked all the same.

-- +goose Up
ALTER TABLE events DROP CONSTRAINT events_actor_kind_check,
    ADD CONSTRAINT events_actor_kind_check CHECK (actor_kind IN ('user', 'bot', 'system', 'sandbox', 'github')) NOT VALID;

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION logbook_append(
    p_session       uuid,
    p_expected_seq  bigint,      -- NULL: no expectation
    p_epoch         bigint,      -- NULL: not fenced
    p_event_ids     uuid[],
    p_types         text[],
    p_actor_kinds   text[],
    p_actor_ids     text[],
    p_payloads      jsonb[],
    p_keys          text[],
    p_sanitized     boolean[]
) RETURNS SETOF logbook_appended
LANGUAGE plpgsql AS $$
DECLARE
    v_seq      bigint;
    v_hash     bytea;
    v_now      timestamptz;
    v_phash    bytea;
    v_new_hash bytea;
    v_epoch    bigint;
    v_fresh    integer := 0;
    v_row      logbook_appended;
    i          integer;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtextextended(p_session::text, 7461));

    IF p_epoch IS NOT NULL THEN
        SELECT l.epoch INTO v_epoch FROM leases l WHERE l.session_id = p_session;
        IF v_epoch IS DISTINCT FROM p_epoch THEN
            RAISE EXCEPTION 'logbook: append to session % with stale lease epoch % (current %)',
                p_session, p_epoch, coalesce(v_epoch::text, 'none') USING ERRCODE = 'LB002';
        END IF;
    END IF;

    SELECT e.seq, e.hash INTO v_seq, v_hash
      FROM events e WHERE e.session_id = p_session ORDER BY e.seq DESC LIMIT 1;
    IF NOT FOUND THEN
        -- The session's first event: the one check the foreign key made, made once.
        PERFORM 1 FROM sessions s WHERE s.id = p_session;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'logbook: session % does not exist', p_session USING ERRCODE = 'LB003';
        END IF;
        v_seq := 0;
        v_hash := '\x0000000000000000000000000000000000000000000000000000000000000000'::bytea;
    END IF;

    -- An expectation is checked only when something new would be written: a retried
    -- append whose every event is a duplicate returns the stored events.
    IF p_expected_seq IS NOT NULL THEN
        FOR i IN 1 .. coalesce(array_length(p_types, 1), 0) LOOP
            IF p_keys[i] IS NULL OR NOT EXISTS (
                SELECT 1 FROM events e WHERE e.session_id = p_session AND e.idempotency_key = p_keys[i]) THEN
                v_fresh := v_fresh + 1;
            END IF;
        END LOOP;
        IF v_fresh > 0 AND v_seq <> p_expected_seq THEN
            RAISE EXCEPTION 'logbook: append to session % expected seq %, head is %',
                p_session, p_expected_seq, v_seq
                USING ERRCODE = 'LB001', DETAIL = v_seq::text;
        END IF;
    END IF;

    FOR i IN 1 .. coalesce(array_length(p_types, 1), 0) LOOP
        IF p_keys[i] IS NOT NULL THEN
            RETURN QUERY
                SELECT e.seq, e.event_id, e.created_at, e.payload_hash, e.prev_hash, e.hash,
                       e.position, true, e.type, e.actor_kind, e.actor_id, e.payload, e.sanitized
                  FROM events e
                 WHERE e.session_id = p_session AND e.idempotency_key = p_keys[i];
            IF FOUND THEN
                CONTINUE;
            END IF;
        END IF;

        v_seq   := v_seq + 1;
        v_now   := clock_timestamp();
        v_phash := sha256(convert_to(p_payloads[i]::text, 'UTF8'));
        -- The header of logbook_event_header, written out: a SQL function call costs more
        -- than the rest of the hash.
        v_new_hash := sha256(v_hash
            || convert_to(concat_ws('|',
                   'logbook-event-v1',
                   p_session::text,
                   v_seq::text,
                   p_event_ids[i]::text,
                   octet_length(p_types[i])::text || ':' || p_types[i],
                   octet_length(p_actor_kinds[i])::text || ':' || p_actor_kinds[i],
                   octet_length(p_actor_ids[i])::text || ':' || p_actor_ids[i],
                   ((extract(epoch FROM v_now) * 1000000)::bigint)::text,
                   CASE WHEN p_keys[i] IS NULL THEN '-' ELSE octet_length(p_keys[i])::text || ':' || p_keys[i] END
               ), 'UTF8')
            || v_phash);

        INSERT INTO events AS e (session_id, seq, event_id, type, actor_kind, actor_id, created_at,
                                 payload, payload_hash, idempotency_key, prev_hash, hash, sanitized)
        VALUES (p_session, v_seq, p_event_ids[i], p_types[i], p_actor_kinds[i], p_actor_ids[i], v_now,
                p_payloads[i], v_phash, p_keys[i], v_hash, v_new_hash, p_sanitized[i])
        RETURNING e.seq, e.event_id, e.created_at, e.payload_hash, e.prev_hash, e.hash, e.position,
                  false, NULL::text, NULL::text, NULL::text, NULL::jsonb, e.sanitized
        INTO v_row;
        RETURN NEXT v_row;
        v_hash := v_new_hash;

        -- session_work, under the append lock: no other transaction writes the session's row.
        IF p_types[i] IN ('user_message', 'followup_signal') THEN
            -- An in-place update while the message's hour and the pending flag stay (00011);
            -- created_at may go back with the clock, hence greatest.
            UPDATE session_work AS w
               SET last_message_seq = v_seq, last_message_at = greatest(w.last_message_at, v_now)
             WHERE w.session_id = p_session;
            IF NOT FOUND THEN
                INSERT INTO session_work (session_id, last_message_seq, last_message_at)
                VALUES (p_session, v_seq, v_now);
            END IF;
        ELSIF p_types[i] IN ('turn_completed', 'turn_suspended', 'approval_decided', 'stop_requested') THEN
            PERFORM logbook_track_turn(p_session, v_seq, p_types[i], p_payloads[i]);
        END IF;
    END LOOP;
END
$$;
-- +goose StatementEnd

CREATE INDEX events_followup_subscribed ON events ((payload->>'repo'), (payload->>'branch'))
    WHERE type = 'followup_subscribed';
CREATE INDEX events_followup_ended ON events (session_id) WHERE type = 'followup_ended';

-- +goose Down
ALTER TABLE events DROP CONSTRAINT events_actor_kind_check,
    ADD CONSTRAINT events_actor_kind_check CHECK (actor_kind IN ('user', 'bot', 'system', 'sandbox')) NOT VALID;
DROP INDEX events_followup_ended;
DROP INDEX events_followup_subscribed;

-- 00060's logbook_append.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION logbook_append(
    p_session       uuid,
    p_expected_seq  bigint,      -- NULL: no expectation
    p_epoch         bigint,      -- NULL: not fenced
    p_event_ids     uuid[],
    p_types         text[],
    p_actor_kinds   text[],
    p_actor_ids     text[],
    p_payloads      jsonb[],
    p_keys          text[],
    p_sanitized     boolean[]
) RETURNS SETOF logbook_appended
LANGUAGE plpgsql AS $$
DECLARE
    v_seq      bigint;
    v_hash     bytea;
    v_now      timestamptz;
    v_phash    bytea;
    v_new_hash bytea;
    v_epoch    bigint;
    v_fresh    integer := 0;
    v_row      logbook_appended;
    i          integer;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtextextended(p_session::text, 7461));

    IF p_epoch IS NOT NULL THEN
        SELECT l.epoch INTO v_epoch FROM leases l WHERE l.session_id = p_session;
        IF v_epoch IS DISTINCT FROM p_epoch THEN
            RAISE EXCEPTION 'logbook: append to session % with stale lease epoch % (current %)',
                p_session, p_epoch, coalesce(v_epoch::text, 'none') USING ERRCODE = 'LB002';
        END IF;
    END IF;

    SELECT e.seq, e.hash INTO v_seq, v_hash
      FROM events e WHERE e.session_id = p_session ORDER BY e.seq DESC LIMIT 1;
    IF NOT FOUND THEN
        -- The session's first event: the one check the foreign key made, made once.
        PERFORM 1 FROM sessions s WHERE s.id = p_session;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'logbook: session % does not exist', p_session USING ERRCODE = 'LB003';
        END IF;
        v_seq := 0;
        v_hash := '\x0000000000000000000000000000000000000000000000000000000000000000'::bytea;
    END IF;

    -- An expectation is checked only when something new would be written: a retried
    -- append whose every event is a duplicate returns the stored events.
    IF p_expected_seq IS NOT NULL THEN
        FOR i IN 1 .. coalesce(array_length(p_types, 1), 0) LOOP
            IF p_keys[i] IS NULL OR NOT EXISTS (
                SELECT 1 FROM events e WHERE e.session_id = p_session AND e.idempotency_key = p_keys[i]) THEN
                v_fresh := v_fresh + 1;
            END IF;
        END LOOP;
        IF v_fresh > 0 AND v_seq <> p_expected_seq THEN
            RAISE EXCEPTION 'logbook: append to session % expected seq %, head is %',
                p_session, p_expected_seq, v_seq
                USING ERRCODE = 'LB001', DETAIL = v_seq::text;
        END IF;
    END IF;

    FOR i IN 1 .. coalesce(array_length(p_types, 1), 0) LOOP
        IF p_keys[i] IS NOT NULL THEN
            RETURN QUERY
                SELECT e.seq, e.event_id, e.created_at, e.payload_hash, e.prev_hash, e.hash,
                       e.position, true, e.type, e.actor_kind, e.actor_id, e.payload, e.sanitized
                  FROM events e
                 WHERE e.session_id = p_session AND e.idempotency_key = p_keys[i];
            IF FOUND THEN
                CONTINUE;
            END IF;
        END IF;

        v_seq   := v_seq + 1;
        v_now   := clock_timestamp();
        v_phash := sha256(convert_to(p_payloads[i]::text, 'UTF8'));
        -- The header of logbook_event_header, written out: a SQL function call costs more
        -- than the rest of the hash.
        v_new_hash := sha256(v_hash
            || convert_to(concat_ws('|',
                   'logbook-event-v1',
                   p_session::text,
                   v_seq::text,
                   p_event_ids[i]::text,
                   octet_length(p_types[i])::text || ':' || p_types[i],
                   octet_length(p_actor_kinds[i])::text || ':' || p_actor_kinds[i],
                   octet_length(p_actor_ids[i])::text || ':' || p_actor_ids[i],
                   ((extract(epoch FROM v_now) * 1000000)::bigint)::text,
                   CASE WHEN p_keys[i] IS NULL THEN '-' ELSE octet_length(p_keys[i])::text || ':' || p_keys[i] END
               ), 'UTF8')
            || v_phash);

        INSERT INTO events AS e (session_id, seq, event_id, type, actor_kind, actor_id, created_at,
                                 payload, payload_hash, idempotency_key, prev_hash, hash, sanitized)
        VALUES (p_session, v_seq, p_event_ids[i], p_types[i], p_actor_kinds[i], p_actor_ids[i], v_now,
                p_payloads[i], v_phash, p_keys[i], v_hash, v_new_hash, p_sanitized[i])
        RETURNING e.seq, e.event_id, e.created_at, e.payload_hash, e.prev_hash, e.hash, e.position,
                  false, NULL::text, NULL::text, NULL::text, NULL::jsonb, e.sanitized
        INTO v_row;
        RETURN NEXT v_row;
        v_hash := v_new_hash;

        -- session_work, under the append lock: no other transaction writes the session's row.
        IF p_types[i] = 'user_message' THEN
            -- An in-place update while the message's hour and the pending flag stay (00011);
            -- created_at may go back with the clock, hence greatest.
            UPDATE session_work AS w
               SET last_message_seq = v_seq, last_message_at = greatest(w.last_message_at, v_now)
             WHERE w.session_id = p_session;
            IF NOT FOUND THEN
                INSERT INTO session_work (session_id, last_message_seq, last_message_at)
                VALUES (p_session, v_seq, v_now);
            END IF;
        ELSIF p_types[i] IN ('turn_completed', 'turn_suspended', 'approval_decided', 'stop_requested') THEN
            PERFORM logbook_track_turn(p_session, v_seq, p_types[i], p_payloads[i]);
        END IF;
    END LOOP;
END
$$;
-- +goose StatementEnd
