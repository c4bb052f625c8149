-- OAuth tokens of remote MCP servers (bot/connectors), one per (server, channel): an admin
-- connects a server for a channel once through the web pages (authorization code with PKCE),
-- and logbook adds the access token to its calls of that server, refreshing it as it
-- expires. Columns:
--   server        the server's name in LOGBOOK_MCP_CONFIG
--   channel       the channel id it was connected for
--   sealed        the token (access, refresh, expiry) as JSON sealed with AES-256-GCM under
--                 LOGBOOK_SECRET_KEY (12-byte nonce, then the ciphertext): a copy of the
--                 table alone gives no token
--   connected_by  who connected it (the web pages' identity), connected_at when
--   refreshed_at  when logbook last stored a refreshed token (NULL: never)
-- Every connect is also an access-log record (action 'mcp_connect', its query naming the
-- server and channel, never the token).

-- +goose Up
CREATE TABLE mcp_tokens (
    server       text        NOT NULL CHECK (server <> ''),
    channel      text        NOT NULL CHECK (channel <> ''),
    sealed       bytea       NOT NULL,
    connected_by text        NOT NULL CHECK (connected_by <> ''),
    connected_at timestamptz NOT NULL,
    refreshed_at timestamptz,
    PRIMARY KEY (server, channel)
);

REVOKE ALL ON mcp_tokens FROM PUBLIC;
GRANT SELECT, INSERT, UPDATE ON mcp_tokens TO logbook_app;

ALTER TABLE access_log DROP CONSTRAINT access_log_action_check,
    ADD CONSTRAINT access_log_action_check
        CHECK (action IN ('list', 'view', 'download', 'search', 'signin', 'signout', 'usage', 'mcp_connect'));

-- +goose Down
ALTER TABLE access_log DROP CONSTRAINT access_log_action_check,
    ADD CONSTRAINT access_log_action_check
        CHECK (action IN ('list', 'view', 'download', 'search', 'signin', 'signout', 'usage')) NOT VALID;
DROP TABLE mcp_tokens;
