-- An append does only the work it must: logbook_append keeps session_work itself, the
-- events → sessions foreign key goes, and the function returns a named row type.
--
-- Measured per single user_message append, in server instructions (callgrind of one backend
-- running 100 and then 300 prepared appends, the difference divided by 200; docs/measurements.md):
-- 908k before, 761k after, against 325k for a raw INSERT into a table of the same shape. Where
-- the 147k went:
--   * session_work was kept by two AFTER INSERT triggers (events_track_message, 00011, and
--     events_track_work, 00008). Every insert into events, of any type, paid for both WHEN
--     clauses: PostgreSQL reads each trigger's WHEN expression from its stored text and compiles
--     it again for every INSERT statement (51k for the two), and a user_message then paid a
--     trigger call (queued after the row, a plpgsql frame with NEW built from the row): 191k in
--     all, where the same UPDATE run by logbook_append costs 113k.
--   * the foreign key events.session_id → sessions checked every row with
--     SELECT ... FOR KEY SHARE on the session's row: 43k, and a row lock written to the WAL
--     and to the sessions page, a page that the appends of up to ~100 sessions all lock.
--     What it guarded is kept without it: logbook_append refuses a session that does not exist
--     (LB003) when it appends the session's first event, and sessions are never deleted (the
--     append-only trigger on sessions refuses it to everyone), so a session that has events
--     exists. Only logbook_append writes events (a writer that went around it would also skip
--     the chain, which `logbook audit verify` finds).
--   * RETURNS TABLE made PostgreSQL build the result's row descriptor from the function's 23
--     argument names and modes on every call (24k); a named composite type comes from the
--     type cache.
--
-- session_work is still kept in the append's transaction, under the session's append lock, so
-- the pending poll reads what it read before (and stays flat in the log's size). It is now
-- kept by appends made through logbook_append, which is every append the application makes.
-- What each event type does to it is unchanged: user_message as logbook_track_message did
-- (00011: an in-place update), the turn markers as logbook_track_work did (00008), now in
-- logbook_track_turn.

-- +goose Up
ALTER TABLE events DROP CONSTRAINT events_session_id_fkey;

DROP TRIGGER events_track_message ON events;
DROP TRIGGER events_track_work ON events;
DROP FUNCTION logbook_track_message();
DROP FUNCTION logbook_track_work();

-- logbook_track_turn keeps session_work for a turn marker appended at p_seq: turn_completed,
-- turn_suspended, approval_decided, stop_requested (00008 says what each means).
-- +goose StatementBegin
CREATE FUNCTION logbook_track_turn(p_session uuid, p_seq bigint, p_type text, p_payload jsonb) RETURNS void
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

DROP FUNCTION logbook_append(uuid, bigint, bigint, uuid[], text[], text[], text[], jsonb[], text[], boolean[]);

-- One row per event of an append, as logbook_append (00001) returned it.
CREATE TYPE logbook_appended AS (
    seq bigint, event_id uuid, created_at timestamptz, payload_hash bytea,
    prev_hash bytea, hash bytea, "position" bigint, duplicate boolean,
    type text, actor_kind text, actor_id text, payload jsonb, sanitized boolean
);

-- logbook_append is 00001's (same arguments, rows, errors and chain) and keeps session_work.
-- +goose StatementBegin
CREATE FUNCTION logbook_append(
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

-- +goose Down
DROP FUNCTION logbook_append(uuid, bigint, bigint, uuid[], text[], text[], text[], jsonb[], text[], boolean[]);
DROP TYPE logbook_appended;
DROP FUNCTION logbook_track_turn(uuid, bigint, text, jsonb);

-- 00001's logbook_append.
-- +goose StatementBegin
CREATE FUNCTION logbook_append(
    p_session       uuid,
    p_expected_seq  bigint,
    p_epoch         bigint,
    p_event_ids     uuid[],
    p_types         text[],
    p_actor_kinds   text[],
    p_actor_ids     text[],
    p_payloads      jsonb[],
    p_keys          text[],
    p_sanitized     boolean[]
) RETURNS TABLE (
    seq bigint, event_id uuid, created_at timestamptz, payload_hash bytea,
    prev_hash bytea, hash bytea, "position" bigint, duplicate boolean,
    type text, actor_kind text, actor_id text, payload jsonb, sanitized boolean
)
LANGUAGE plpgsql AS $$
DECLARE
    v_seq      bigint;
    v_hash     bytea;
    v_now      timestamptz;
    v_phash    bytea;
    v_new_hash bytea;
    v_epoch    bigint;
    v_fresh    integer := 0;
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
        PERFORM 1 FROM sessions s WHERE s.id = p_session;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'logbook: session % does not exist', p_session USING ERRCODE = 'LB003';
        END IF;
        v_seq := 0;
        v_hash := '\x0000000000000000000000000000000000000000000000000000000000000000'::bytea;
    END IF;
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
        INTO seq, event_id, created_at, payload_hash, prev_hash, hash, "position",
             duplicate, type, actor_kind, actor_id, payload, sanitized;
        RETURN NEXT;
        v_hash := v_new_hash;
    END LOOP;
END
$$;
-- +goose StatementEnd

-- 00008's logbook_track_work and 00011's logbook_track_message, their triggers, the foreign key.
-- +goose StatementBegin
CREATE FUNCTION logbook_track_work() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.type = 'user_message' THEN
        INSERT INTO session_work AS w (session_id, last_message_seq, last_message_at)
        VALUES (NEW.session_id, NEW.seq, NEW.created_at)
        ON CONFLICT (session_id) DO UPDATE
           SET last_message_seq = greatest(w.last_message_seq, EXCLUDED.last_message_seq),
               last_message_at  = greatest(w.last_message_at, EXCLUDED.last_message_at);
    ELSIF NEW.type = 'turn_completed' THEN
        INSERT INTO session_work AS w (session_id, answered_seq, answered_through)
        VALUES (NEW.session_id, NEW.seq, logbook_turn_through(NEW.payload))
        ON CONFLICT (session_id) DO UPDATE
           SET answered_seq = EXCLUDED.answered_seq, answered_through = EXCLUDED.answered_through,
               awaiting_until = NULL
         WHERE w.answered_seq < EXCLUDED.answered_seq;
    ELSIF NEW.type = 'turn_suspended' THEN
        UPDATE session_work
           SET awaiting_until = CASE WHEN EXISTS (
                   SELECT 1 FROM events e
                    WHERE e.session_id = NEW.session_id AND e.seq > logbook_payload_int(NEW.payload, 'turn')
                      AND ((e.type = 'approval_decided' AND e.payload->>'call_id' = NEW.payload->>'call_id')
                        OR e.type = 'stop_requested'))
               THEN NULL ELSE logbook_payload_time(NEW.payload, 'until') END,
               awaiting_through = least(last_message_seq, logbook_payload_int(NEW.payload, 'seen'))
         WHERE session_id = NEW.session_id;
    ELSE
        UPDATE session_work SET awaiting_until = NULL
         WHERE session_id = NEW.session_id AND awaiting_until IS NOT NULL;
    END IF;
    RETURN NULL;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION logbook_track_message() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE session_work AS w
       SET last_message_seq = NEW.seq,
           last_message_at  = greatest(w.last_message_at, NEW.created_at)
     WHERE w.session_id = NEW.session_id AND w.last_message_seq < NEW.seq;
    IF NOT FOUND THEN
        INSERT INTO session_work AS w (session_id, last_message_seq, last_message_at)
        VALUES (NEW.session_id, NEW.seq, NEW.created_at)
        ON CONFLICT (session_id) DO UPDATE
           SET last_message_seq = greatest(w.last_message_seq, EXCLUDED.last_message_seq),
               last_message_at  = greatest(w.last_message_at, EXCLUDED.last_message_at);
    END IF;
    RETURN NULL;
END
$$;
-- +goose StatementEnd

CREATE TRIGGER events_track_work AFTER INSERT ON events
    FOR EACH ROW WHEN (NEW.type IN ('turn_completed', 'turn_suspended', 'approval_decided', 'stop_requested'))
    EXECUTE FUNCTION logbook_track_work();
CREATE TRIGGER events_track_message AFTER INSERT ON events
    FOR EACH ROW WHEN (NEW.type = 'user_message')
    EXECUTE FUNCTION logbook_track_message();

ALTER TABLE events ADD CONSTRAINT events_session_id_fkey FOREIGN KEY (session_id) REFERENCES sessions (id);
