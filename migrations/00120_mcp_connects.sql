-- Pending OAuth connects of remote MCP servers (bot/connectors): begun on the web pages
-- (/mcp/<server>/connect) and finished by the authorization server's redirect to
-- /mcp/callback, which may land on any replica. One row per connect, taken (deleted) by the
-- callback: a state is good once. Columns:
--   state_hash  sha256 of the state sent to the authorization server (the state itself, a
--               bearer secret in a URL, is not stored)
--   server      the server's name in LOGBOOK_MCP_CONFIG; channel the channel id
--   who         the admin who began it: only they may finish it
--   sealed      the PKCE verifier and the endpoints used, as JSON sealed with AES-256-GCM under
--               LOGBOOK_SECRET_KEY, bound to state_hash, server, channel and who
--   expires_at  10 minutes after it began; an expired row is refused and swept by the next
--               connect

-- +goose Up
CREATE TABLE mcp_connects (
    state_hash bytea       PRIMARY KEY,
    server     text        NOT NULL CHECK (server <> ''),
    channel    text        NOT NULL CHECK (channel <> ''),
    who        text        NOT NULL CHECK (who <> ''),
    sealed     bytea       NOT NULL,
    expires_at timestamptz NOT NULL
);

REVOKE ALL ON mcp_connects FROM PUBLIC;
GRANT SELECT, INSERT, DELETE ON mcp_connects TO logbook_app;

-- +goose Down
DROP TABLE mcp_connects;
