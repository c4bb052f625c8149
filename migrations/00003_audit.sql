-- Audit: records of who read the log, scheduled export runs, legal holds and retention purges.
-- Every table here is a record: append-only by statement triggers (any UPDATE, DELETE or
-- TRUNCATE fails, even one that matches no row, for everyone, superusers included, short of
-- disabling the trigger) and by grants. State that changes over time is derived from
-- appended rows: a run's outcome is a later row of the same run_id, a hold's removal is a later
-- row of the same hold_id.
--
-- Roles (created by 00001):
--   logbook_auditor    reads everything; appends access records, run records and hold changes.
--   logbook_retention  owns logbook_purge_expired (SECURITY DEFINER), the only way payloads go.
--   logbook_app        none of these tables, and no EXECUTE on the purge function.
-- The migrating role must be a superuser or a member of logbook_retention (to give it the
-- function), otherwise create the function by hand as documented in audit/doc.go.

-- +goose Up
-- +goose StatementBegin
CREATE FUNCTION logbook_audit_reject_change() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'logbook: % on % is not allowed: audit records are append-only', TG_OP, TG_TABLE_NAME
        USING ERRCODE = 'insufficient_privilege';
END
$$;
-- +goose StatementEnd

-- Every export, verification and hold change, made by a person or by the scheduler.
CREATE TABLE audit_access (
    id        uuid        PRIMARY KEY,
    at        timestamptz NOT NULL DEFAULT clock_timestamp(),
    who       text        NOT NULL CHECK (who <> ''),
    who_kind  text        NOT NULL CHECK (who_kind IN ('person', 'system')),
    db_user   text        NOT NULL DEFAULT session_user,
    action    text        NOT NULL CHECK (action ~ '^[a-z][a-z_-]{0,63}$'),
    filters   jsonb       NOT NULL DEFAULT '{}'
);
CREATE INDEX audit_access_at ON audit_access (at);

-- Scheduled export runs: one row when a run starts, one more with its outcome.
CREATE TABLE audit_runs (
    run_id        uuid        NOT NULL,
    schedule      text        NOT NULL CHECK (schedule <> ''),
    window_start  timestamptz NOT NULL,
    window_end    timestamptz NOT NULL,
    status        text        NOT NULL CHECK (status IN ('started', 'succeeded', 'failed', 'interrupted')),
    at            timestamptz NOT NULL DEFAULT clock_timestamp(),
    node          text        NOT NULL,
    events        bigint,
    files         jsonb,
    error         text,
    PRIMARY KEY (run_id, status),
    CONSTRAINT audit_runs_window CHECK (window_end > window_start)
);
-- A window is exported once per schedule, however many replicas run it.
CREATE UNIQUE INDEX audit_runs_once ON audit_runs (schedule, window_start) WHERE status = 'succeeded';
CREATE INDEX audit_runs_by_schedule ON audit_runs (schedule, window_end);

-- Legal holds: an 'add' row opens a hold, a 'remove' row of the same hold_id ends it.
CREATE TABLE audit_holds (
    change_id  bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    hold_id    uuid        NOT NULL,
    action     text        NOT NULL CHECK (action IN ('add', 'remove')),
    scope      text        NOT NULL CHECK (scope IN ('session', 'channel', 'actor')),
    value      text        NOT NULL CHECK (value <> ''),
    reason     text        NOT NULL CHECK (reason <> ''),
    who        text        NOT NULL CHECK (who <> ''),
    at         timestamptz NOT NULL DEFAULT clock_timestamp(),
    CONSTRAINT audit_holds_once UNIQUE (hold_id, action)
);

-- Retention purges: what was removed, so the absence is explainable.
CREATE TABLE audit_purges (
    id             bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    session_id     uuid        NOT NULL REFERENCES sessions (id),
    from_seq       bigint      NOT NULL,
    to_seq         bigint      NOT NULL,
    purged         bigint      NOT NULL,
    head_seq       bigint      NOT NULL,
    head_hash      bytea       NOT NULL,
    last_event_at  timestamptz NOT NULL,
    cutoff         timestamptz NOT NULL,
    reason         text        NOT NULL CHECK (reason <> ''),
    who            text        NOT NULL CHECK (who <> ''),
    at             timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX audit_purges_session ON audit_purges (session_id);

CREATE TRIGGER audit_access_append_only BEFORE UPDATE OR DELETE OR TRUNCATE ON audit_access
    FOR EACH STATEMENT EXECUTE FUNCTION logbook_audit_reject_change();
CREATE TRIGGER audit_runs_append_only BEFORE UPDATE OR DELETE OR TRUNCATE ON audit_runs
    FOR EACH STATEMENT EXECUTE FUNCTION logbook_audit_reject_change();
CREATE TRIGGER audit_holds_append_only BEFORE UPDATE OR DELETE OR TRUNCATE ON audit_holds
    FOR EACH STATEMENT EXECUTE FUNCTION logbook_audit_reject_change();
CREATE TRIGGER audit_purges_append_only BEFORE UPDATE OR DELETE OR TRUNCATE ON audit_purges
    FOR EACH STATEMENT EXECUTE FUNCTION logbook_audit_reject_change();

-- logbook_purge_expired removes the payloads of every session whose last event is older than
-- p_cutoff and that no open legal hold covers (by session id, by the session's channel, or by
-- any actor of the session). Each event's skeleton stays: ids, seq, type, actor, time,
-- payload_hash and chain hashes, so the chain still verifies. One audit_purges row per session
-- purged, also returned. Holds and purges serialise on advisory lock 7461002; each session is
-- purged under its append lock, so an append that lands meanwhile makes it ineligible.
-- Errors: 22023 empty reason or who, or a cutoff in the future.
-- +goose StatementBegin
CREATE FUNCTION logbook_purge_expired(p_cutoff timestamptz, p_reason text, p_who text)
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
REVOKE ALL ON FUNCTION logbook_purge_expired(timestamptz, text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION logbook_purge_expired(timestamptz, text, text) TO logbook_retention;

REVOKE ALL ON audit_access, audit_runs, audit_holds, audit_purges FROM PUBLIC;
GRANT SELECT, INSERT ON audit_access, audit_runs, audit_holds TO logbook_auditor;
GRANT SELECT ON audit_purges TO logbook_auditor;
GRANT SELECT ON audit_holds TO logbook_retention;
GRANT SELECT, INSERT ON audit_purges TO logbook_retention;
GRANT SELECT ON sessions TO logbook_retention;

-- +goose Down
DROP FUNCTION logbook_purge_expired(timestamptz, text, text);
DROP TABLE audit_purges;
DROP TABLE audit_holds;
DROP TABLE audit_runs;
DROP TABLE audit_access;
DROP FUNCTION logbook_audit_reject_change();
