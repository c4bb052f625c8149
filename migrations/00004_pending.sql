-- Pending work: one row per session that has a user_message or a turn_completed, kept by a
-- trigger on events, so that the poll for sessions with unanswered messages
-- (session.Store.Pending) reads a small partial index instead of scanning days of events.
--
-- session_work is state derived from the log, not the log: the trigger updates it in place.
-- Its columns:
--   last_message_seq  highest seq of the session's user_message events (0: none)
--   last_message_at   latest created_at of those events (NULL: none)
--   answered_seq      seq of the session's latest turn_completed (0: none)
--   answered_through  that turn_completed's payload "through": the last user_message seq it
--                     answered (0 when absent or not an integer)
-- A session has pending work when last_message_seq > answered_through. Both values are taken
-- when the event is appended, so a retention purge (which removes payloads, not rows) does
-- not change them.
--
-- Only inserts of user_message and turn_completed fire the trigger (its WHEN clause is
-- checked without calling the function): other appends pay nothing. The trigger runs inside
-- the append's transaction, under the session's append lock (session.LockSessionSeed), so a
-- session's row is never updated by two appends at once and no other session waits.

-- +goose Up
CREATE TABLE session_work (
    session_id        uuid        PRIMARY KEY REFERENCES sessions (id),
    last_message_seq  bigint      NOT NULL DEFAULT 0,
    last_message_at   timestamptz,
    answered_seq      bigint      NOT NULL DEFAULT 0,
    answered_through  bigint      NOT NULL DEFAULT 0
);
-- Only sessions with pending work are in this index; the poll scans those newer than its window.
CREATE INDEX session_work_pending ON session_work (last_message_at)
    WHERE last_message_seq > answered_through;

-- logbook_turn_through reads a turn_completed payload's "through" as the poll always has
-- ((payload->>'through')::bigint, NULL as 0), except that a value that is not an integer
-- reads as 0 instead of failing the append.
-- +goose StatementBegin
CREATE FUNCTION logbook_turn_through(p jsonb) RETURNS bigint
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN p->>'through' ~ '^\s*[-+]?[0-9]{1,18}\s*$' THEN (p->>'through')::bigint ELSE 0 END
$$;
-- +goose StatementEnd

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
    ELSE -- turn_completed: the latest one by seq counts
        INSERT INTO session_work AS w (session_id, answered_seq, answered_through)
        VALUES (NEW.session_id, NEW.seq, logbook_turn_through(NEW.payload))
        ON CONFLICT (session_id) DO UPDATE
           SET answered_seq = EXCLUDED.answered_seq, answered_through = EXCLUDED.answered_through
         WHERE w.answered_seq < EXCLUDED.answered_seq;
    END IF;
    RETURN NULL;
END
$$;
-- +goose StatementEnd

CREATE TRIGGER events_track_work AFTER INSERT ON events
    FOR EACH ROW WHEN (NEW.type IN ('user_message', 'turn_completed'))
    EXECUTE FUNCTION logbook_track_work();

-- The log written before this migration. The trigger already holds events' lock, so no
-- append lands between it and this backfill. Payloads already purged read as through 0, as
-- the poll read them before.
INSERT INTO session_work (session_id, last_message_seq, last_message_at, answered_seq, answered_through)
SELECT e.session_id,
       coalesce(max(e.seq) FILTER (WHERE e.type = 'user_message'), 0),
       max(e.created_at) FILTER (WHERE e.type = 'user_message'),
       coalesce(max(e.seq) FILTER (WHERE e.type = 'turn_completed'), 0),
       coalesce((SELECT logbook_turn_through(t.payload) FROM events t
                  WHERE t.session_id = e.session_id AND t.type = 'turn_completed'
                  ORDER BY t.seq DESC LIMIT 1), 0)
FROM events e
WHERE e.type IN ('user_message', 'turn_completed')
GROUP BY e.session_id;

REVOKE ALL ON session_work FROM PUBLIC;
GRANT SELECT, INSERT, UPDATE ON session_work TO logbook_app;
GRANT SELECT ON session_work TO logbook_auditor;

-- +goose Down
DROP TRIGGER events_track_work ON events;
DROP FUNCTION logbook_track_work();
DROP FUNCTION logbook_turn_through(jsonb);
DROP TABLE session_work;
