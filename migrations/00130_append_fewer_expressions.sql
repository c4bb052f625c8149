-- logbook_append does the same work in fewer expressions: the same arguments, rows, errors,
-- chain and session_work as 00090's (00060's, with followup_signal kept as a user_message is),
-- byte for byte (the audit verify and session tests hold it).
--
-- Measured per single user_message append, in server instructions (callgrind of one backend
-- running 100 and then 300 prepared appends, the difference divided by 200; docs/measurements.md):
-- 840k before (00090), 810k after (-3.6 %), against 359k for the benchmark's raw INSERT (00090's
-- two partial indexes on events are on its copy too). The same edits on 00060's function:
-- 816k → 786k, assistant_message 734k → 701k (-4.5 %), raw INSERT 336k. These runs print each
-- row in single-user mode, ~55k more than 00060's figures for a call that returns one. Where the
-- 30k went:
--   * plpgsql prepares every simple expression it evaluates again in each transaction, and an
--     append is one transaction: its cost grows with the expression's nodes. The header was a
--     concat_ws over four ::text casts and three `octet_length(x)::text || ':' || x` chains,
--     with each array element read (subscripted) twice; one format() call over the same values
--     prints the same text (%s uses the type's output function, as the casts did): 15k.
--   * p_types[i] and p_keys[i] were subscripted in up to five places each (the header, the
--     INSERT's VALUES, the idempotency probe, the type tests); read once into variables: 15k.
-- Tried and not kept: building the returned row from the variables and RETURNING only the
-- position (+19k: a row constructor costs more than the RETURNING list); the payload read once
-- into a variable as well (-0.5k); dropping the session_work → sessions foreign key (-3.5k).
-- The largest remaining part of the session_work UPDATE (109k in all) is its two generated
-- columns (pending, last_message_hour: 37k), whose expressions PostgreSQL reads from their stored
-- text again for every UPDATE statement; keeping them as plain columns means every writer of
-- session_work (the purge, the turn markers) keeps them, and was left alone.

-- +goose Up
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
    v_type     text;         -- p_types[i], read once
    v_key      text;         -- p_keys[i], read once
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
        v_type := p_types[i];
        v_key  := p_keys[i];
        IF v_key IS NOT NULL THEN
            RETURN QUERY
                SELECT e.seq, e.event_id, e.created_at, e.payload_hash, e.prev_hash, e.hash,
                       e.position, true, e.type, e.actor_kind, e.actor_id, e.payload, e.sanitized
                  FROM events e
                 WHERE e.session_id = p_session AND e.idempotency_key = v_key;
            IF FOUND THEN
                CONTINUE;
            END IF;
        END IF;

        v_seq   := v_seq + 1;
        v_now   := clock_timestamp();
        v_phash := sha256(convert_to(p_payloads[i]::text, 'UTF8'));
        -- The header of logbook_event_header, written out: a SQL function call costs more
        -- than the rest of the hash. One format() instead of concat_ws over casts and ||
        -- (the same text: %s prints a value by its type's output function, as ::text does;
        -- concat_ws would skip a NULL where format prints nothing, but every field but the
        -- key is a NOT NULL column, so a row with a NULL there is never written).
        v_new_hash := sha256(v_hash
            || convert_to(format('logbook-event-v1|%s|%s|%s|%s:%s|%s:%s|%s:%s|%s|%s',
                   p_session, v_seq, p_event_ids[i],
                   octet_length(v_type), v_type,
                   octet_length(p_actor_kinds[i]), p_actor_kinds[i],
                   octet_length(p_actor_ids[i]), p_actor_ids[i],
                   (extract(epoch FROM v_now) * 1000000)::bigint,
                   CASE WHEN v_key IS NULL THEN '-' ELSE octet_length(v_key) || ':' || v_key END
               ), 'UTF8')
            || v_phash);

        INSERT INTO events AS e (session_id, seq, event_id, type, actor_kind, actor_id, created_at,
                                 payload, payload_hash, idempotency_key, prev_hash, hash, sanitized)
        VALUES (p_session, v_seq, p_event_ids[i], v_type, p_actor_kinds[i], p_actor_ids[i], v_now,
                p_payloads[i], v_phash, v_key, v_hash, v_new_hash, p_sanitized[i])
        RETURNING e.seq, e.event_id, e.created_at, e.payload_hash, e.prev_hash, e.hash, e.position,
                  false, NULL::text, NULL::text, NULL::text, NULL::jsonb, e.sanitized
        INTO v_row;
        RETURN NEXT v_row;
        v_hash := v_new_hash;

        -- session_work, under the append lock: no other transaction writes the session's row.
        IF v_type IN ('user_message', 'followup_signal') THEN
            -- An in-place update while the message's hour and the pending flag stay (00011);
            -- created_at may go back with the clock, hence greatest.
            UPDATE session_work AS w
               SET last_message_seq = v_seq, last_message_at = greatest(w.last_message_at, v_now)
             WHERE w.session_id = p_session;
            IF NOT FOUND THEN
                INSERT INTO session_work (session_id, last_message_seq, last_message_at)
                VALUES (p_session, v_seq, v_now);
            END IF;
        ELSIF v_type IN ('turn_completed', 'turn_suspended', 'approval_decided', 'stop_requested') THEN
            PERFORM logbook_track_turn(p_session, v_seq, v_type, p_payloads[i]);
        END IF;
    END LOOP;
END
$$;
-- +goose StatementEnd

-- +goose Down
-- 00090's logbook_append.
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
