-- The record streamed out (issue 51): one tailer per sink (a webhook of LOGBOOK_WEBHOOKS, the
-- audit stream of LOGBOOK_AUDIT_STREAM) follows the log from a durable cursor.
--
-- stream_cursors: one row per sink. (tx_id, position) is the last event the sink has taken,
-- in the order of session.Store.ReadAll (transaction id, then position, only below the oldest
-- running transaction: gap-safe). owner and lease_until are the sink's lease: exactly one
-- replica tails a sink at a time; another takes the row over once lease_until has passed (its
-- holder died) and resumes from the cursor. An advance of the cursor names its owner, so a
-- replica that lost the lease cannot move it.
--
-- stream_dead_letters: an event a webhook could not deliver within its retries' bounded age,
-- by sink and event (session id, seq; the body is made again from the log when it is
-- redelivered, so no message text is kept here). redelivered_at is set once an operator's
-- `logbook webhooks redeliver` delivered it.

-- +goose Up
CREATE TABLE stream_cursors (
    sink        text        PRIMARY KEY CHECK (length(sink) BETWEEN 1 AND 200),
    tx_id       xid8        NOT NULL,
    position    bigint      NOT NULL,
    owner       text        CHECK (length(owner) BETWEEN 1 AND 200),
    lease_until timestamptz,
    updated_at  timestamptz NOT NULL DEFAULT clock_timestamp()
);

CREATE TABLE stream_dead_letters (
    id             bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    sink           text        NOT NULL CHECK (length(sink) BETWEEN 1 AND 200),
    session_id     uuid        NOT NULL,
    seq            bigint      NOT NULL CHECK (seq > 0),
    event_type     text        NOT NULL,
    webhook_type   text        NOT NULL,
    attempts       integer     NOT NULL CHECK (attempts > 0),
    last_error     text        NOT NULL,
    dead_at        timestamptz NOT NULL DEFAULT clock_timestamp(),
    redelivered_at timestamptz,
    UNIQUE (sink, session_id, seq)
);
CREATE INDEX stream_dead_letters_open ON stream_dead_letters (sink, id) WHERE redelivered_at IS NULL;

REVOKE ALL ON stream_cursors, stream_dead_letters FROM PUBLIC;
GRANT SELECT, INSERT, UPDATE, DELETE ON stream_cursors, stream_dead_letters TO logbook_app;
GRANT SELECT ON stream_cursors, stream_dead_letters TO logbook_auditor;

-- +goose Down
DROP TABLE stream_dead_letters;
DROP TABLE stream_cursors;
