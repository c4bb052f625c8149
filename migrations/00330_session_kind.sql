-- Session kinds (issue 50): a session is a Slack thread's ('thread', every session before
-- this migration and every one opened by a thread), or the eval record of a what-if
-- (`logbook replay --from`, `logbook eval`: 'replay'). A replay session is in its original's
-- channel (its spend is that channel's) under a thread ts no Slack ts looks like
-- ('replay-' and its id), so that nothing that asks Slack about a thread (catch-up, delivery)
-- can mistake it for one; the check ties the two. It holds no user_message, so the runner's
-- poll (session_work) never wakes it, and the thread listings (Store.Recent, search) leave it
-- out.

-- +goose Up
ALTER TABLE sessions ADD COLUMN kind text NOT NULL DEFAULT 'thread';
ALTER TABLE sessions ADD CONSTRAINT sessions_kind CHECK (kind IN ('thread', 'replay'));
ALTER TABLE sessions ADD CONSTRAINT sessions_replay_thread CHECK ((kind = 'replay') = (thread_ts LIKE 'replay-%'));

-- +goose Down
ALTER TABLE sessions DROP CONSTRAINT sessions_replay_thread;
ALTER TABLE sessions DROP CONSTRAINT sessions_kind;
ALTER TABLE sessions DROP COLUMN kind;
