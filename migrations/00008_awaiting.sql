-- A turn waiting for a person: a cell may go away while a tool call waits for its approval,
-- and the session must then not count as pending work (or every poll would wake it only for
-- it to wait again) until something can move the turn on.
--
-- The cell that stops waiting in memory appends turn_suspended {"until": the approval's
-- deadline}. session_work then records:
--   awaiting_until    the deadline (NULL: the session waits for nobody)
--   awaiting_through  the last user message the suspending cell had read (payload "seen")
-- and the session is pending again when any of these happens: the deadline passes (the
-- timeout is a denial the next cell records), a user message the cell had not read arrives
-- (it may be "stop"), or a decision, a stop request or the turn's end clears awaiting_until.
-- Payloads are read when the event is appended, so a retention purge does not change them.

-- +goose Up
ALTER TABLE session_work
    ADD COLUMN awaiting_until   timestamptz,
    ADD COLUMN awaiting_through bigint NOT NULL DEFAULT 0;

-- logbook_payload_time reads a payload's timestamp field, NULL when absent or not a time (a
-- malformed value must not fail the append; NULL means "not waiting", the safe reading).
-- +goose StatementBegin
CREATE FUNCTION logbook_payload_time(p jsonb, field text) RETURNS timestamptz
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN (p->>field)::timestamptz;
EXCEPTION WHEN others THEN
    RETURN NULL;
END
$$;
-- +goose StatementEnd

-- logbook_payload_int reads a payload's integer field, 0 when absent or not an integer.
-- +goose StatementBegin
CREATE FUNCTION logbook_payload_int(p jsonb, field text) RETURNS bigint
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN p->>field ~ '^\s*[-+]?[0-9]{1,18}\s*$' THEN (p->>field)::bigint ELSE 0 END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION logbook_track_work() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.type = 'user_message' THEN
        INSERT INTO session_work AS w (session_id, last_message_seq, last_message_at)
        VALUES (NEW.session_id, NEW.seq, NEW.created_at)
        ON CONFLICT (session_id) DO UPDATE
           SET last_message_seq = greatest(w.last_message_seq, EXCLUDED.last_message_seq),
               last_message_at  = greatest(w.last_message_at, EXCLUDED.last_message_at);
    ELSIF NEW.type = 'turn_completed' THEN -- the latest one by seq counts
        INSERT INTO session_work AS w (session_id, answered_seq, answered_through)
        VALUES (NEW.session_id, NEW.seq, logbook_turn_through(NEW.payload))
        ON CONFLICT (session_id) DO UPDATE
           SET answered_seq = EXCLUDED.answered_seq, answered_through = EXCLUDED.answered_through,
               awaiting_until = NULL
         WHERE w.answered_seq < EXCLUDED.answered_seq;
    ELSIF NEW.type = 'turn_suspended' THEN
        -- What the cell did not see before it went away still wakes the session: messages
        -- after the last one it read ("seen"), and a decision or stop appended meanwhile
        -- (they cleared a deadline that was not set yet).
        UPDATE session_work
           SET awaiting_until = CASE WHEN EXISTS (
                   SELECT 1 FROM events e
                    WHERE e.session_id = NEW.session_id AND e.seq > logbook_payload_int(NEW.payload, 'turn')
                      AND ((e.type = 'approval_decided' AND e.payload->>'call_id' = NEW.payload->>'call_id')
                        OR e.type = 'stop_requested'))
               THEN NULL ELSE logbook_payload_time(NEW.payload, 'until') END,
               awaiting_through = least(last_message_seq, logbook_payload_int(NEW.payload, 'seen'))
         WHERE session_id = NEW.session_id;
    ELSE -- approval_decided, stop_requested: the waiting turn can move on
        UPDATE session_work SET awaiting_until = NULL
         WHERE session_id = NEW.session_id AND awaiting_until IS NOT NULL;
    END IF;
    RETURN NULL;
END
$$;
-- +goose StatementEnd

DROP TRIGGER events_track_work ON events;
CREATE TRIGGER events_track_work AFTER INSERT ON events
    FOR EACH ROW WHEN (NEW.type IN ('user_message', 'turn_completed', 'turn_suspended', 'approval_decided', 'stop_requested'))
    EXECUTE FUNCTION logbook_track_work();

-- +goose Down
DROP TRIGGER events_track_work ON events;
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION logbook_track_work() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.type = 'user_message' THEN
        INSERT INTO session_work AS w (session_id, last_message_seq, last_message_at)
        VALUES (NEW.session_id, NEW.seq, NEW.created_at)
        ON CONFLICT (session_id) DO UPDATE
           SET last_message_seq = greatest(w.last_message_seq, EXCLUDED.last_message_seq),
               last_message_at  = greatest(w.last_message_at, EXCLUDED.last_message_at);
    ELSE
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
DROP FUNCTION logbook_payload_int(jsonb, text);
DROP FUNCTION logbook_payload_time(jsonb, text);
ALTER TABLE session_work DROP COLUMN awaiting_through, DROP COLUMN awaiting_until;
