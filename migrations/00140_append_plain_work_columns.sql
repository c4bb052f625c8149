-- session_work's pending and last_message_hour (00011) become plain columns that their writers
-- keep, and logbook_append takes its lock in an expression: the same arguments, rows, errors,
-- chain and session_work as 00130's (the session tests and the fold's test hold it).
--
-- Measured per single user_message append, in server instructions (callgrind of one backend,
-- `postgres --single` on a copy of a private migrated cluster, PREPARE as pgx prepares it, 100
-- and then 300 EXECUTEs, the difference divided by 200; docs/measurements.md): 823.7k before
-- (00130), 785.0k after (-4.7 %), against 341.0k for the benchmark's raw INSERT. Where the 38.6k
-- went:
--   * PostgreSQL 15 builds a table's generated columns for every UPDATE or INSERT statement
--     that writes it from their stored text (ExecInitStoredGenerated: stringToNode, the
--     planner's expression pass, then the executor's), and computes every one of them whatever
--     the statement changes: 39k per session_work UPDATE, most of it the reading and planning.
--     As plain columns they are set in the statement's own SET list, which is planned once per
--     connection: 33k.
--   * PERFORM runs its expression as a query (a plan, an executor start and end, a snapshot);
--     an IF over the same call is a plpgsql simple expression: 4k. The lock is still taken
--     before the head is read, in a statement of its own, so the head read's snapshot is taken
--     after the previous holder of the lock committed.
-- Every writer of session_work keeps the two columns: logbook_append (user_message and
-- followup_signal: the UPDATE in place, the INSERT of a session's first row) and
-- logbook_track_turn (turn_completed moves answered_through and so pending; turn_suspended,
-- approval_decided and stop_requested change neither column's inputs). Nothing else writes
-- session_work (00005's purge leaves it alone); a new writer must set both, as 00011 defined
-- them: pending = last_message_seq > answered_through, last_message_hour =
-- date_trunc('hour', last_message_at AT TIME ZONE 'UTC'). TestSessionWorkKeepsItsDerivedColumns
-- checks both after every branch.
--
-- Tried and not kept: the INSERT's row returned by RETURN QUERY INSERT ... RETURNING instead
-- of RETURNING ... INTO and RETURN NEXT (-1.5k).

-- +goose Up
-- pending and last_message_hour keep their values and become plain columns; the index on them
-- (session_work_pending) stays as it is.
ALTER TABLE session_work
    ALTER COLUMN pending DROP EXPRESSION,
    ALTER COLUMN last_message_hour DROP EXPRESSION;

-- logbook_track_turn is 00060's and keeps pending where a turn_completed moves answered_through
-- (the other turn markers change neither column's inputs).
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION logbook_track_turn(p_session uuid, p_seq bigint, p_type text, p_payload jsonb) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_through bigint;
BEGIN
    IF p_type = 'turn_completed' THEN -- the latest one by seq counts
        -- A new row has no message yet (last_message_seq 0, last_message_at NULL); pending
        -- follows answered_through (00011's definitions).
        v_through := logbook_turn_through(p_payload);
        INSERT INTO session_work AS w (session_id, answered_seq, answered_through, pending, last_message_hour)
        VALUES (p_session, p_seq, v_through, 0 > v_through, NULL)
        ON CONFLICT (session_id) DO UPDATE
           SET answered_seq = EXCLUDED.answered_seq, answered_through = EXCLUDED.answered_through,
               awaiting_until = NULL, pending = w.last_message_seq > EXCLUDED.answered_through
         WHERE w.answered_seq < EXCLUDED.answered_seq;
    ELSIF p_type = 'turn_suspended' THEN
        -- What the cell did not see before it went away still wakes the session: messages
        -- after the last one it read ("seen"), and a decision or stop appended meanwhile
        -- (they cleared a deadline that was not set yet).
        UPDATE session_work
           SET awaiting_until = CASE WHEN EXISTS (
                   SELECT 1 FROM events e
                    WHERE e.session_id = p_session AND e.seq > logbook_payload_int(p_payload, 'turn')
                      AND ((e.type = 'approval_decided' AND e.payload->>'call_id' = p_payload->>'call_id')
                        OR e.type = 'stop_requested'))
               THEN NULL ELSE logbook_payload_time(p_payload, 'until') END,
               awaiting_through = least(last_message_seq, logbook_payload_int(p_payload, 'seen'))
         WHERE session_id = p_session;
    ELSIF p_type IN ('approval_decided', 'stop_requested') THEN -- the waiting turn can move on
        UPDATE session_work SET awaiting_until = NULL
         WHERE session_id = p_session AND awaiting_until IS NOT NULL;
    END IF;
END
$$;
-- +goose StatementEnd

-- logbook_append is 00130's, with its lock taken in an expression and session_work's two
-- columns kept by the user_message UPDATE and INSERT.
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
    -- The session's append lock, taken in an expression (a PERFORM is a query of its own).
    IF pg_advisory_xact_lock(hashtextextended(p_session::text, 7461)) IS NULL THEN END IF;

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
            -- pending and last_message_hour as 00011 defined them (they are kept here now).
            UPDATE session_work AS w
               SET last_message_seq = v_seq, last_message_at = greatest(w.last_message_at, v_now),
                   pending = v_seq > w.answered_through,
                   last_message_hour = date_trunc('hour', greatest(w.last_message_at, v_now) AT TIME ZONE 'UTC')
             WHERE w.session_id = p_session;
            IF NOT FOUND THEN -- answered_through is 0 and v_seq at least 1: pending
                INSERT INTO session_work (session_id, last_message_seq, last_message_at, pending, last_message_hour)
                VALUES (p_session, v_seq, v_now, true, date_trunc('hour', v_now AT TIME ZONE 'UTC'));
            END IF;
        ELSIF v_type IN ('turn_completed', 'turn_suspended', 'approval_decided', 'stop_requested') THEN
            PERFORM logbook_track_turn(p_session, v_seq, v_type, p_payloads[i]);
        END IF;
    END LOOP;
END
$$;
-- +goose StatementEnd

-- +goose Down
ALTER TABLE session_work DROP COLUMN pending, DROP COLUMN last_message_hour; -- and their index
ALTER TABLE session_work
    ADD COLUMN pending boolean GENERATED ALWAYS AS (last_message_seq > answered_through) STORED,
    ADD COLUMN last_message_hour timestamp
        GENERATED ALWAYS AS (date_trunc('hour', last_message_at AT TIME ZONE 'UTC')) STORED;
CREATE INDEX session_work_pending ON session_work (last_message_hour) WHERE pending;

-- 00060's logbook_track_turn.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION logbook_track_turn(p_session uuid, p_seq bigint, p_type text, p_payload jsonb) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF p_type = 'turn_completed' THEN -- the latest one by seq counts
        INSERT INTO session_work AS w (session_id, answered_seq, answered_through)
        VALUES (p_session, p_seq, logbook_turn_through(p_payload))
        ON CONFLICT (session_id) DO UPDATE
           SET answered_seq = EXCLUDED.answered_seq, answered_through = EXCLUDED.answered_through,
               awaiting_until = NULL
         WHERE w.answered_seq < EXCLUDED.answered_seq;
    ELSIF p_type = 'turn_suspended' THEN
        -- What the cell did not see before it went away still wakes the session: messages
        -- after the last one it read ("seen"), and a decision or stop appended meanwhile
        -- (they cleared a deadline that was not set yet).
        UPDATE session_work
           SET awaiting_until = CASE WHEN EXISTS (
                   SELECT 1 FROM events e
                    WHERE e.session_id = p_session AND e.seq > logbook_payload_int(p_payload, 'turn')
                      AND ((e.type = 'approval_decided' AND e.payload->>'call_id' = p_payload->>'call_id')
                        OR e.type = 'stop_requested'))
               THEN NULL ELSE logbook_payload_time(p_payload, 'until') END,
               awaiting_through = least(last_message_seq, logbook_payload_int(p_payload, 'seen'))
         WHERE session_id = p_session;
    ELSIF p_type IN ('approval_decided', 'stop_requested') THEN -- the waiting turn can move on
        UPDATE session_work SET awaiting_until = NULL
         WHERE session_id = p_session AND awaiting_until IS NOT NULL;
    END IF;
END
$$;
-- +goose StatementEnd

-- 00130's logbook_append.
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

