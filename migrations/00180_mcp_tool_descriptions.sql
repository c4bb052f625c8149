-- What each MCP server's tools said they do, as a channel's sessions were offered them
-- (bot/connectors): a description that changes after the channel first saw it (a "rug pull":
-- a server that earned trust and then rewrote what its tool tells the model) is recorded in
-- the session that met it (an mcp_tool_changed event) and told in its thread. Columns:
--   channel, server, tool  the channel id, the server's name in LOGBOOK_MCP_CONFIG, the
--                          server's own name of the tool
--   sha256                 of the description as the server sent it (whole, before logbook
--                          bounds it for the model)
--   description            that description as the model got it (at most 1 KiB)
--   first_seen             when a session of the channel first listed the tool
--   changed_at             when its description last changed (NULL: never)

-- +goose Up
CREATE TABLE mcp_tool_descriptions (
    channel     text        NOT NULL CHECK (channel <> ''),
    server      text        NOT NULL CHECK (server <> ''),
    tool        text        NOT NULL CHECK (tool <> ''),
    sha256      bytea       NOT NULL CHECK (length(sha256) = 32),
    description text        NOT NULL,
    first_seen  timestamptz NOT NULL,
    changed_at  timestamptz,
    PRIMARY KEY (channel, server, tool)
);

REVOKE ALL ON mcp_tool_descriptions FROM PUBLIC;
GRANT SELECT, INSERT, UPDATE ON mcp_tool_descriptions TO logbook_app;

-- +goose Down
DROP TABLE mcp_tool_descriptions;
