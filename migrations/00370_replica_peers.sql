-- Waking only the replica that runs a session (issue 53). A follow-up stored by a replica
-- that does not run its session was routed by NOTIFY to the lease's owner; PostgreSQL (15)
-- signals every backend that LISTENs in the database on each NOTIFY, whatever its channel, and
-- each reads the queue in a transaction of its own, so a routed message cost one transaction
-- per replica (5.6 of the 9 transactions a message that ten replicas added over one).
--
-- A replica that says where its peers reach it (LOGBOOK_PEER_ADDR) records that address here,
-- with the bearer token its wake endpoint takes, while it holds its liveness claim. The
-- statement that finds a session's live owner reads the owner's row in the same round trip:
-- with one, the sender posts the wake to that replica alone (no NOTIFY, no transaction on
-- any other replica); without one, or when the post fails, the NOTIFY goes as before.
--
-- A row outlives a replica that died without a word; the next replica to record its own
-- deletes every row whose owner's liveness claim is free. Only logbook_app reads the table
-- (the tokens are secrets): the auditor role is not granted it.

-- +goose Up
CREATE TABLE replica_peers (
    owner       text PRIMARY KEY,
    addr        text NOT NULL CHECK (addr <> ''),
    token       text NOT NULL CHECK (length(token) >= 32),
    recorded_at timestamptz NOT NULL DEFAULT clock_timestamp()
);
REVOKE ALL ON replica_peers FROM PUBLIC;
GRANT SELECT, INSERT, UPDATE, DELETE ON replica_peers TO logbook_app;

-- +goose Down
DROP TABLE replica_peers;
