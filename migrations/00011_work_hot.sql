-- Keeping session_work costs a user_message append one cheap in-place update instead of a
-- row lock, a new row version and two index entries.
--
-- Before this migration every user_message rewrote its session's session_work row through
-- INSERT ... ON CONFLICT DO UPDATE: the speculative insert probes the primary key and locks
-- the row (one WAL record), then the update writes a new version of it; and since the
-- version changed last_message_at and last_message_seq, columns of the partial index
-- session_work_pending (its key and its predicate), PostgreSQL could not update it in place
-- (HOT) and added an entry to both the primary key and session_work_pending. The primary key's
-- leaf and session_work_pending's right edge are pages every session's append writes, so
-- appends of different sessions queued on them.
--
-- Now:
--   * the index is on columns a user_message rarely changes: pending (stored, generated:
--     last_message_seq > answered_through, the predicate it replaces) and last_message_hour
--     (last_message_at rounded down to the hour, UTC). While a session has pending work and its
--     messages come within the same hour, an append changes neither, and the row is updated in
--     place (the table keeps free room on each page for that: fillfactor 50).
--   * the poll bounds its index scan by the hour of its window's start and then checks
--     last_message_at exactly, so it returns what it returned before.
--   * the trigger's user_message branch is a plain UPDATE, and inserts the row only for the
--     session's first user_message or turn marker.
-- The trigger keeps firing for user_message (any insert into events keeps session_work, not
-- only logbook_append), and its other branches are those of 00008_awaiting.sql.

-- +goose Up
DROP INDEX session_work_pending;
ALTER TABLE session_work
    ADD COLUMN pending boolean GENERATED ALWAYS AS (last_message_seq > answered_through) STORED,
    ADD COLUMN last_message_hour timestamp
        GENERATED ALWAYS AS (date_trunc('hour', last_message_at AT TIME ZONE 'UTC')) STORED;
ALTER TABLE session_work SET (fillfactor = 50);
-- Only sessions with pending work are in this index; the poll scans those newer than its window.
CREATE INDEX session_work_pending ON session_work (last_message_hour) WHERE pending;

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION logbook_track_work() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.type = 'user_message' THEN
        -- seqs only grow; created_at may not (the clock can step back), hence greatest.
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

-- +goose Down
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
DROP INDEX session_work_pending;
ALTER TABLE session_work RESET (fillfactor);
ALTER TABLE session_work DROP COLUMN last_message_hour, DROP COLUMN pending;
CREATE INDEX session_work_pending ON session_work (last_message_at)
    WHERE last_message_seq > answered_through;
