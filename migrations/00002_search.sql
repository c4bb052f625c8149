-- Search and web access: projections of the log for full-text search and the session list,
-- and the append-only access log of the web pages.
--
-- search_docs, search_sessions and search_cursor are projections, not the log: the indexer
-- (session/search.Indexer) rebuilds them from events at any time, so the application role
-- may UPDATE them. Nothing was added to the events table (appends stay as fast as before).
--
-- access_log is evidence, like events: the application role has INSERT and SELECT only, and
-- the append-only trigger of the log rejects UPDATE, DELETE and TRUNCATE. Audit exports
-- include it. Its columns:
--   id          global order of the records
--   at          when the request was served (server clock)
--   who         the person: the trusted proxy header's value (e.g. an e-mail address set by
--               oauth2-proxy) or the name of the bearer token used
--   via         how they were identified: 'proxy_header' or 'bearer_token'
--   auditor     whether they were treated as an auditor (may see hidden sessions and deleted text)
--   action      'list' (recent sessions), 'view' (transcript page), 'download' (transcript in a
--               format), 'search'
--   session_id  the session viewed or downloaded (NULL for list and search)
--   format      the download format (text, md, html, json), NULL otherwise
--   query       the search as the person typed it, with its filters (NULL otherwise)
--   results     how many sessions or hits were shown
--   status      the HTTP status answered
--   remote_addr the client address as the server saw it
--   user_agent  the client's User-Agent header

-- +goose Up
-- One row per searchable message: user and assistant messages, tool calls and tool results.
-- Edits replace body (edited = true); deletions empty it (deleted = true), so deleted text is
-- no longer found.
CREATE TABLE search_docs (
    session_id  uuid        NOT NULL REFERENCES sessions (id),
    seq         bigint      NOT NULL,          -- the event's seq in its session
    kind        text        NOT NULL CHECK (kind IN ('user', 'assistant', 'tool')),
    channel_id  text        NOT NULL,
    thread_ts   text        NOT NULL,
    ts          text        NOT NULL DEFAULT '', -- Slack ts of the message ('' until delivered)
    actor_kind  text        NOT NULL,
    actor_id    text        NOT NULL,
    actor_name  text        NOT NULL DEFAULT '',
    created_at  timestamptz NOT NULL,
    edited      boolean     NOT NULL DEFAULT false,
    deleted     boolean     NOT NULL DEFAULT false,
    body        text        NOT NULL,
    tsv         tsvector    GENERATED ALWAYS AS (to_tsvector('english'::regconfig, body)) STORED,
    PRIMARY KEY (session_id, seq)
);
CREATE INDEX search_docs_tsv ON search_docs USING gin (tsv);
CREATE INDEX search_docs_time ON search_docs (created_at);
CREATE INDEX search_docs_channel_time ON search_docs (channel_id, created_at);
CREATE INDEX search_docs_actor_time ON search_docs (actor_id, created_at);
CREATE INDEX search_docs_actor_name ON search_docs (lower(actor_name));
CREATE INDEX search_docs_session_ts ON search_docs (session_id, ts);

-- One row per session: what the recent-sessions page and transcripts by thread need.
CREATE TABLE search_sessions (
    session_id     uuid        PRIMARY KEY REFERENCES sessions (id),
    team_id        text        NOT NULL,
    channel_id     text        NOT NULL,
    thread_ts      text        NOT NULL,
    title          text        NOT NULL DEFAULT '',
    first_text     text        NOT NULL DEFAULT '', -- start of the first user message
    started_at     timestamptz NOT NULL,
    last_event_at  timestamptz NOT NULL,
    messages       integer     NOT NULL DEFAULT 0    -- user and assistant messages
);
CREATE INDEX search_sessions_recent ON search_sessions (last_event_at DESC);
CREATE INDEX search_sessions_thread ON search_sessions (channel_id, thread_ts);

-- Where the indexer is in the log (session.Store.ReadAll's cursor).
CREATE TABLE search_cursor (
    name      text    PRIMARY KEY,
    tx_id     xid8    NOT NULL,
    position  bigint  NOT NULL
);

CREATE TABLE access_log (
    id           bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at           timestamptz NOT NULL DEFAULT clock_timestamp(),
    who          text        NOT NULL CHECK (who <> ''),
    via          text        NOT NULL CHECK (via IN ('proxy_header', 'bearer_token')),
    auditor      boolean     NOT NULL DEFAULT false,
    action       text        NOT NULL CHECK (action IN ('list', 'view', 'download', 'search')),
    session_id   uuid,
    format       text,
    query        text,
    results      integer,
    status       integer     NOT NULL,
    remote_addr  text        NOT NULL DEFAULT '',
    user_agent   text        NOT NULL DEFAULT ''
);
CREATE INDEX access_log_at ON access_log (at);
CREATE INDEX access_log_who_at ON access_log (who, at);

CREATE TRIGGER access_log_append_only_row BEFORE UPDATE OR DELETE ON access_log
    FOR EACH ROW EXECUTE FUNCTION logbook_reject_change();
CREATE TRIGGER access_log_append_only_truncate BEFORE TRUNCATE ON access_log
    FOR EACH STATEMENT EXECUTE FUNCTION logbook_reject_change();

REVOKE ALL ON search_docs, search_sessions, search_cursor, access_log FROM PUBLIC;
GRANT SELECT, INSERT, UPDATE, DELETE ON search_docs, search_sessions, search_cursor TO logbook_app;
GRANT SELECT ON search_docs, search_sessions, search_cursor TO logbook_auditor;
GRANT SELECT, INSERT ON access_log TO logbook_app;
GRANT SELECT ON access_log TO logbook_auditor;

-- +goose Down
DROP TABLE access_log;
DROP TABLE search_cursor;
DROP TABLE search_sessions;
DROP TABLE search_docs;
