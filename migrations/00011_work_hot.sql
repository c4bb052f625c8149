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
--   * a user_message is kept by a trigger of its own (events_track_message) whose update is a
--     plain UPDATE; it inserts the row only for the session's first user_message or turn
--     marker. events_track_work (00008_awaiting.sql, unchanged) no longer fires for
--     user_message, so its first branch is not reached any more.
-- A trigger, not logbook_append, still keeps session_work: any insert into events keeps it.

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
CREATE FUNCTION logbook_track_message() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
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
    RETURN NULL;
END
$$;
-- +goose StatementEnd

DROP TRIGGER events_track_work ON events;
CREATE TRIGGER events_track_work AFTER INSERT ON events
    FOR EACH ROW WHEN (NEW.type IN ('turn_completed', 'turn_suspended', 'approval_decided', 'stop_requested'))
    EXECUTE FUNCTION logbook_track_work();
CREATE TRIGGER events_track_message AFTER INSERT ON events
    FOR EACH ROW WHEN (NEW.type = 'user_message')
    EXECUTE FUNCTION logbook_track_message();

-- +goose Down
DROP TRIGGER events_track_message ON events;
DROP FUNCTION logbook_track_message();
DROP TRIGGER events_track_work ON events;
CREATE TRIGGER events_track_work AFTER INSERT ON events
    FOR EACH ROW WHEN (NEW.type IN ('user_message', 'turn_completed', 'turn_suspended', 'approval_decided', 'stop_requested'))
    EXECUTE FUNCTION logbook_track_work();
DROP INDEX session_work_pending;
ALTER TABLE session_work RESET (fillfactor);
ALTER TABLE session_work DROP COLUMN last_message_hour, DROP COLUMN pending;
CREATE INDEX session_work_pending ON session_work (last_message_at)
    WHERE last_message_seq > answered_through;
