-- A single event's append becomes one statement of the client's (session/appendone.go) instead
-- of a call of logbook_append. session_work keeps each session's head (its last event's seq,
-- time and hash, and the hash before it); the statement moves the head with one UPDATE, under
-- the row's lock, and inserts the event from what that UPDATE returned (a data-modifying CTE).
-- The chain, the rows returned and session_work are logbook_append's, byte for byte.
-- logbook_append stays for everything else: several events, the four turn markers
-- logbook_track_turn follows, and whatever the statement leaves to it. The statement
-- answers no row when the session has no session_work row, when an expected seq or a fencing
-- epoch differs, or when the key is stored already; the client then calls logbook_append, which raises or
-- returns the stored event, as before.
--
-- Why a statement and not the function: the function's cost is the PL/pgSQL call itself, not
-- the work it does. Its statements' executors start again in every transaction, its simple
-- expressions are prepared again in every transaction, and there are the ten one-element arrays
-- and the SETOF's tuplestore. Measured per single user_message append, in server instructions
-- (callgrind of one backend, `postgres --single` on a copy of a private migrated cluster,
-- PREPARE as pgx prepares it, then 100 and then 300 EXECUTEs, the difference divided by 200;
-- docs/measurements.md), on this migration's schema: logbook_append 820k (808k before it: the
-- head columns cost the function 12k), the statement 594k (-28 %), the benchmark's raw INSERT
-- 348k. The statement returns only what the server decided (seq, time, hashes, position): the
-- other seven columns of logbook_append's row, which the client has already, cost 40k there.
-- A fenced assistant_message (a turn's usual event): 598k, against 825k for logbook_append's
-- unfenced one (the fenced call reads the lease as well).
--
-- The statement keeps what logbook_append guarantees:
--   * One writer of a session at a time. It takes the session's append lock (session.
--     LockSessionSeed) in the UPDATE's filter, before the row is locked for writing, so the
--     purge, the lease functions and logbook_append wait for it, and it for them, as before. The
--     row's lock and PostgreSQL's re-check of a row updated meanwhile (EvalPlanQual) give it
--     the newest head, whatever snapshot the statement started with. The key's check (NOT
--     EXISTS) is read from that starting snapshot: a duplicate stored meanwhile makes the
--     INSERT collide with events' unique key, and the client retries through logbook_append,
--     which returns the stored event.
--   * A fenced append is refused unless its epoch is the lease's. session_work.lease_epoch is
--     kept by a trigger on leases in the transaction that changes the epoch, which holds the
--     session's append lock and then updates the row; the statement compares the epoch on the
--     row it updates, re-checked on the newest version if a takeover committed meanwhile.
--   * created_at is read from the clock after the lock. clock_timestamp() sits in the sub-select
--     of the UPDATE's SET, evaluated once for the row (again if the row is re-checked), as in
--     logbook_append. So an event's time is never before its transaction's id (audit exports
--     rely on it), nor before the previous event's, but for a clock that steps back.
--   * A head behind the log (a row left by a direct INSERT into events) cannot fork the chain.
--     The INSERT then collides with events' primary key, and the client retries through
--     logbook_append, which reads the head from events and repairs the row.
--
-- Every session has a session_work row from now on. Store.Open makes it with the session
-- (pending false, head 0 and the zero hash); this migration makes the missing ones; and
-- logbook_append makes one for a session that lacks it (a session inserted by other means).

-- +goose Up
-- Locks in the order an append takes them (events, then session_work; a lease change: leases,
-- then session_work), so that a running replica's append or takeover waits for this migration
-- rather than deadlocking with it: no event is appended and no lease changes hands between the
-- reading of the heads and epochs below and this migration's commit.
LOCK TABLE events IN SHARE MODE;
LOCK TABLE leases IN SHARE ROW EXCLUSIVE MODE;

ALTER TABLE session_work
    ADD COLUMN head_seq  bigint NOT NULL DEFAULT 0,
    ADD COLUMN head_at   timestamptz,
    ADD COLUMN head_prev bytea,
    ADD COLUMN head_hash bytea NOT NULL
        DEFAULT '\x0000000000000000000000000000000000000000000000000000000000000000'::bytea,
    ADD COLUMN lease_epoch bigint;

INSERT INTO session_work (session_id, pending)
SELECT s.id, false FROM sessions s
 WHERE NOT EXISTS (SELECT 1 FROM session_work w WHERE w.session_id = s.id);

-- Each session's head through events' primary key (one index probe a session, no sort of the
-- whole log while appends wait).
UPDATE session_work w
   SET head_seq = h.seq, head_at = h.created_at, head_prev = h.prev_hash, head_hash = h.hash
  FROM sessions s
 CROSS JOIN LATERAL (SELECT e.seq, e.created_at, e.prev_hash, e.hash FROM events e
                      WHERE e.session_id = s.id ORDER BY e.seq DESC LIMIT 1) h
 WHERE w.session_id = s.id;

-- The lease's epoch beside the head, for a fenced one-event append: a trigger on leases keeps
-- it, in the transaction (under the session's append lock, in logbook_acquire_lease) that
-- changes it, so the statement's re-check of the row sees the epoch the lease has.
UPDATE session_work w SET lease_epoch = l.epoch FROM leases l WHERE l.session_id = w.session_id;

-- +goose StatementBegin
CREATE FUNCTION logbook_keep_lease_epoch() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO session_work AS w (session_id, pending, lease_epoch)
    VALUES (NEW.session_id, false, NEW.epoch)
    ON CONFLICT (session_id) DO UPDATE SET lease_epoch = EXCLUDED.lease_epoch;
    RETURN NULL;
END
$$;
-- +goose StatementEnd
CREATE TRIGGER leases_keep_epoch AFTER INSERT OR UPDATE OF epoch ON leases
    FOR EACH ROW EXECUTE FUNCTION logbook_keep_lease_epoch();

-- logbook_append is 00140's, keeping session_work's head: in the user_message UPDATE when a
-- message is the last event written, else in one UPDATE after the loop.
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
    v_prev     bytea;        -- the hash before the last event written
    v_kept     boolean := true; -- session_work's head is the last event written
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
        v_prev := v_hash;
        v_hash := v_new_hash;
        v_kept := false;

        -- session_work, under the append lock: no other transaction writes the session's row.
        IF v_type IN ('user_message', 'followup_signal') THEN
            -- An in-place update while the message's hour and the pending flag stay (00011);
            -- created_at may go back with the clock, hence greatest.
            -- pending and last_message_hour as 00011 defined them (they are kept here now).
            -- The head moves in the same UPDATE.
            UPDATE session_work AS w
               SET last_message_seq = v_seq, last_message_at = greatest(w.last_message_at, v_now),
                   pending = v_seq > w.answered_through,
                   last_message_hour = date_trunc('hour', greatest(w.last_message_at, v_now) AT TIME ZONE 'UTC'),
                   head_seq = v_seq, head_at = v_now, head_prev = v_prev, head_hash = v_hash
             WHERE w.session_id = p_session;
            IF NOT FOUND THEN -- answered_through is 0 and v_seq at least 1: pending
                INSERT INTO session_work (session_id, last_message_seq, last_message_at, pending, last_message_hour,
                                          head_seq, head_at, head_prev, head_hash)
                VALUES (p_session, v_seq, v_now, true, date_trunc('hour', v_now AT TIME ZONE 'UTC'),
                        v_seq, v_now, v_prev, v_hash);
            END IF;
            v_kept := true;
        ELSIF v_type IN ('turn_completed', 'turn_suspended', 'approval_decided', 'stop_requested') THEN
            PERFORM logbook_track_turn(p_session, v_seq, v_type, p_payloads[i]);
        END IF;
    END LOOP;

    -- session_work's head follows the last event written (the one-event statement reads it).
    IF NOT v_kept THEN
        UPDATE session_work AS w
           SET head_seq = v_seq, head_at = v_now, head_prev = v_prev, head_hash = v_hash
         WHERE w.session_id = p_session;
        IF NOT FOUND THEN -- a session whose row Store.Open did not make: no message yet
            INSERT INTO session_work (session_id, pending, head_seq, head_at, head_prev, head_hash)
            VALUES (p_session, false, v_seq, v_now, v_prev, v_hash);
        END IF;
    END IF;
END
$$;
-- +goose StatementEnd

-- +goose Down
DROP TRIGGER leases_keep_epoch ON leases;
DROP FUNCTION logbook_keep_lease_epoch();
ALTER TABLE session_work DROP COLUMN head_seq, DROP COLUMN head_at, DROP COLUMN head_prev,
    DROP COLUMN head_hash, DROP COLUMN lease_epoch;

-- 00140's logbook_append.
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
