-- A session is a Slack thread: channel + thread ts. Channel ids are global in Slack (a Slack
-- Connect channel has the same id in every organisation it joins), while the envelope's outer
-- team_id names whichever organisation the event came through: in a channel hosted by another
-- organisation it is that organisation's id. Sessions were keyed by (team_id, channel_id,
-- thread_ts), so lookups by our own team missed those threads and catch-up could open a second
-- session for the same thread. From here on:
--   * team_id records the team that owns (hosts) the channel, as first seen; it is no part of
--     the key;
--   * a thread has at most one session opened after this migration: by_thread is true on
--     every new row (its default) and a partial unique index holds (channel_id, thread_ts)
--     among them;
--   * rows from before keep by_thread NULL (sessions stay append-only: nothing is updated).
--     Where the old key let one thread have two sessions, the oldest (created_at, then id) is
--     the thread's session for every lookup by thread; the others keep their events and stay
--     readable by id (transcripts, search, audit), and get nothing new. The application looks
--     a thread up before it opens one, so no new row duplicates an old one.
-- Channel repositories (/logbook repo) are likewise the channel's, whichever team set them.

-- +goose Up
ALTER TABLE sessions ADD COLUMN by_thread boolean;
ALTER TABLE sessions ALTER COLUMN by_thread SET DEFAULT true;
ALTER TABLE sessions ADD CONSTRAINT sessions_by_thread_true CHECK (by_thread);
CREATE UNIQUE INDEX sessions_thread_once ON sessions (channel_id, thread_ts) WHERE by_thread;
CREATE INDEX sessions_channel_thread ON sessions (channel_id, thread_ts, created_at, id);
CREATE INDEX channel_repos_by_channel ON channel_repos (channel, id DESC);

-- +goose Down
DROP INDEX channel_repos_by_channel;
DROP INDEX sessions_channel_thread;
DROP INDEX sessions_thread_once;
ALTER TABLE sessions DROP CONSTRAINT sessions_by_thread_true;
ALTER TABLE sessions DROP COLUMN by_thread;
