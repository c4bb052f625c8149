-- The session log: one row per thread in sessions, one row per event in events.
-- Append-only is enforced here, not by convention:
--   * the application role logbook_app has INSERT and SELECT on the log and nothing else;
--   * a trigger rejects UPDATE, DELETE and TRUNCATE of events for everyone (superusers
--     included) except the retention path (role logbook_retention inside a purge);
--   * every event carries hash = sha256(prev_hash || header || payload_hash), so an edit made
--     with the trigger disabled is found by `logbook audit verify`.

-- +goose Up
-- +goose StatementBegin
DO $$
BEGIN
    -- Roles are cluster-wide: create them once, whichever database migrates first.
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'logbook_app') THEN
        CREATE ROLE logbook_app NOLOGIN;
    END IF;
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'logbook_auditor') THEN
        CREATE ROLE logbook_auditor NOLOGIN;
    END IF;
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'logbook_retention') THEN
        CREATE ROLE logbook_retention NOLOGIN;
    END IF;
EXCEPTION WHEN unique_violation OR duplicate_object THEN
    -- Another database's migration created the role concurrently.
    NULL;
END
$$;
-- +goose StatementEnd

CREATE TABLE sessions (
    id          uuid        PRIMARY KEY,
    team_id     text        NOT NULL,
    channel_id  text        NOT NULL,
    thread_ts   text        NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
    CONSTRAINT sessions_thread_key UNIQUE (team_id, channel_id, thread_ts),
    CONSTRAINT sessions_key_not_empty CHECK (team_id <> '' AND channel_id <> '' AND thread_ts <> '')
);

CREATE TABLE events (
    session_id       uuid        NOT NULL REFERENCES sessions (id),
    seq              bigint      NOT NULL CHECK (seq >= 1),
    event_id         uuid        NOT NULL,
    type             text        NOT NULL CHECK (type ~ '^[a-z][a-z_]{0,63}$'),
    actor_kind       text        NOT NULL CHECK (actor_kind IN ('user', 'bot', 'system', 'sandbox')),
    actor_id         text        NOT NULL,
    created_at       timestamptz NOT NULL,
    payload          jsonb,                  -- NULL only after a retention purge
    payload_hash     bytea       NOT NULL,   -- sha256(payload::text), kept when the payload is purged
    idempotency_key  text,
    prev_hash        bytea       NOT NULL,
    hash             bytea       NOT NULL,
    sanitized        boolean     NOT NULL DEFAULT false,
    position         bigint      GENERATED ALWAYS AS IDENTITY,
    tx_id            xid8        NOT NULL DEFAULT pg_current_xact_id(),
    PRIMARY KEY (session_id, seq),
    CONSTRAINT events_event_id UNIQUE (event_id),
    CONSTRAINT events_position UNIQUE (position)
);

CREATE UNIQUE INDEX events_idempotency ON events (session_id, idempotency_key)
    WHERE idempotency_key IS NOT NULL;
-- Cross-session readers page by (tx_id, position) below the oldest running transaction.
CREATE INDEX events_tx_position ON events (tx_id, position);
CREATE INDEX events_actor_time ON events (actor_kind, actor_id, created_at);
CREATE INDEX events_time ON events (created_at);

-- Leases decide which replica's cell runs a session. The epoch is a fencing token: an append
-- that carries an epoch is refused unless it is the session's current one.
CREATE TABLE leases (
    session_id  uuid        PRIMARY KEY REFERENCES sessions (id),
    owner       text        NOT NULL,
    epoch       bigint      NOT NULL,
    expires_at  timestamptz NOT NULL
);

-- +goose StatementBegin
CREATE FUNCTION logbook_reject_change() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF current_user = 'logbook_retention' AND current_setting('logbook.purge', true) = 'on' THEN
        IF TG_OP = 'UPDATE' THEN RETURN NEW; END IF;
        IF TG_OP = 'DELETE' THEN RETURN OLD; END IF;
        RETURN NULL;
    END IF;
    RAISE EXCEPTION 'logbook: % on % is not allowed: the session log is append-only', TG_OP, TG_TABLE_NAME
        USING ERRCODE = 'insufficient_privilege',
              HINT = 'append a new event instead (e.g. user_message_edited); only the retention path may purge';
END
$$;
-- +goose StatementEnd

CREATE TRIGGER events_append_only_row BEFORE UPDATE OR DELETE ON events
    FOR EACH ROW EXECUTE FUNCTION logbook_reject_change();
CREATE TRIGGER events_append_only_truncate BEFORE TRUNCATE ON events
    FOR EACH STATEMENT EXECUTE FUNCTION logbook_reject_change();
CREATE TRIGGER sessions_append_only_row BEFORE UPDATE OR DELETE ON sessions
    FOR EACH ROW EXECUTE FUNCTION logbook_reject_change();
CREATE TRIGGER sessions_append_only_truncate BEFORE TRUNCATE ON sessions
    FOR EACH STATEMENT EXECUTE FUNCTION logbook_reject_change();

-- logbook_event_header is the canonical header that the chain hashes. Go's session.Header
-- builds the same bytes; a test checks they agree. Variable-length fields are length-prefixed
-- so no field can forge a separator.
-- +goose StatementBegin
CREATE FUNCTION logbook_event_header(
    p_session uuid, p_seq bigint, p_event uuid, p_type text, p_actor_kind text, p_actor_id text,
    p_created timestamptz, p_key text
) RETURNS bytea
LANGUAGE sql IMMUTABLE AS $$
    SELECT convert_to(concat_ws('|',
        'logbook-event-v1',
        p_session::text,
        p_seq::text,
        p_event::text,
        octet_length(p_type)::text || ':' || p_type,
        octet_length(p_actor_kind)::text || ':' || p_actor_kind,
        octet_length(p_actor_id)::text || ':' || p_actor_id,
        ((extract(epoch FROM p_created) * 1000000)::bigint)::text,
        CASE WHEN p_key IS NULL THEN '-' ELSE octet_length(p_key)::text || ':' || p_key END
    ), 'UTF8')
$$;
-- +goose StatementEnd

-- logbook_append appends a batch of events to one session in one transaction and one round
-- trip. It serialises appenders of the same session with a transaction-scoped advisory lock
-- (appenders of other sessions never wait), reads the head, and computes the chain in SQL.
-- Returns one row per input event, in input order; duplicate = true for an event whose
-- idempotency key was already in the session (the stored event is returned instead); only
-- duplicates carry type, actor and payload, which the caller has for the others.
-- Errors (SQLSTATE): LB001 expected seq does not match the head; LB002 stale fencing epoch;
-- LB003 unknown session.
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
        INTO seq, event_id, created_at, payload_hash, prev_hash, hash, "position",
             duplicate, type, actor_kind, actor_id, payload, sanitized;
        RETURN NEXT;
        v_hash := v_new_hash;
    END LOOP;
END
$$;
-- +goose StatementEnd

-- logbook_acquire_lease takes or renews the lease of a session for owner, under the same
-- advisory lock as appends, so a fenced append never races a takeover. It returns the epoch,
-- which grows by one whenever the owner changes or an expired lease is taken again.
-- Returns no row when another owner holds an unexpired lease.
-- +goose StatementBegin
CREATE FUNCTION logbook_acquire_lease(p_session uuid, p_owner text, p_ttl interval)
RETURNS TABLE (epoch bigint, expires_at timestamptz)
LANGUAGE plpgsql AS $$
DECLARE
    v leases%ROWTYPE;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtextextended(p_session::text, 7461));
    SELECT * INTO v FROM leases l WHERE l.session_id = p_session;
    IF NOT FOUND THEN
        INSERT INTO leases AS l (session_id, owner, epoch, expires_at)
        VALUES (p_session, p_owner, 1, clock_timestamp() + p_ttl)
        RETURNING l.epoch, l.expires_at INTO epoch, expires_at;
        RETURN NEXT;
        RETURN;
    END IF;
    IF v.owner = p_owner AND v.expires_at > clock_timestamp() THEN
        UPDATE leases l SET expires_at = clock_timestamp() + p_ttl
         WHERE l.session_id = p_session
        RETURNING l.epoch, l.expires_at INTO epoch, expires_at;
        RETURN NEXT;
        RETURN;
    END IF;
    IF v.expires_at <= clock_timestamp() THEN
        UPDATE leases l SET owner = p_owner, epoch = v.epoch + 1, expires_at = clock_timestamp() + p_ttl
         WHERE l.session_id = p_session
        RETURNING l.epoch, l.expires_at INTO epoch, expires_at;
        RETURN NEXT;
    END IF;
END
$$;
-- +goose StatementEnd

-- logbook_renew_lease extends a lease only if (owner, epoch) still holds it. No row: lost.
-- +goose StatementBegin
CREATE FUNCTION logbook_renew_lease(p_session uuid, p_owner text, p_epoch bigint, p_ttl interval)
RETURNS TABLE (expires_at timestamptz)
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(hashtextextended(p_session::text, 7461));
    RETURN QUERY
        UPDATE leases l SET expires_at = clock_timestamp() + p_ttl
         WHERE l.session_id = p_session AND l.owner = p_owner AND l.epoch = p_epoch
           AND l.expires_at > clock_timestamp()
        RETURNING l.expires_at;
END
$$;
-- +goose StatementEnd

-- logbook_release_lease ends a lease held by (owner, epoch) at once; the epoch is kept so the
-- next holder's epoch is larger.
-- +goose StatementBegin
CREATE FUNCTION logbook_release_lease(p_session uuid, p_owner text, p_epoch bigint)
RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(hashtextextended(p_session::text, 7461));
    UPDATE leases l SET expires_at = clock_timestamp() - interval '1 microsecond'
     WHERE l.session_id = p_session AND l.owner = p_owner AND l.epoch = p_epoch;
    RETURN FOUND;
END
$$;
-- +goose StatementEnd

REVOKE ALL ON sessions, events, leases FROM PUBLIC;
GRANT SELECT, INSERT ON sessions, events TO logbook_app;
GRANT SELECT, INSERT, UPDATE ON leases TO logbook_app;
GRANT SELECT ON sessions, events, leases TO logbook_auditor;
GRANT SELECT, UPDATE, DELETE ON sessions, events TO logbook_retention;
GRANT SELECT ON leases TO logbook_retention;

-- +goose Down
DROP FUNCTION logbook_release_lease(uuid, text, bigint);
DROP FUNCTION logbook_renew_lease(uuid, text, bigint, interval);
DROP FUNCTION logbook_acquire_lease(uuid, text, interval);
DROP FUNCTION logbook_append(uuid, bigint, bigint, uuid[], text[], text[], text[], jsonb[], text[], boolean[]);
DROP FUNCTION logbook_event_header(uuid, bigint, uuid, text, text, text, timestamptz, text);
DROP TABLE leases;
DROP TABLE events;
DROP TABLE sessions;
DROP FUNCTION logbook_reject_change();
