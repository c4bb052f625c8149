-- Browser sign-ins to the web pages (bot/web): the sign-in cookie holds an opaque random id,
-- and this table holds only its sha256, so neither a copy of the table nor of the access log
-- lets anyone sign in. Signing out deletes the row: a copied cookie stops working at once, on
-- every replica, and a restart signs nobody out. Columns:
--   id_hash     sha256 of the cookie's value (32 bytes)
--   who         the name of the bearer token signed in with (LOGBOOK_WEB_TOKENS), as the
--               access log records it
--   token_mac   HMAC-SHA256 keyed by that token's secret over a fixed label: the session
--               holds only while the token is still configured with the same secret, so
--               rotating or removing a token ends its sessions (the secret itself is never
--               stored)
--   created_at  when the person signed in
--   expires_at  when the session ends by itself (12 hours after sign-in)
-- Rows are not evidence: the access log records every sign-in, failed sign-in and sign-out
-- (actions 'signin' and 'signout', added below; a failed attempt has via 'none', who
-- 'anonymous' and the status it was answered, never the secret tried). Expired rows are
-- deleted by the application.

-- +goose Up
CREATE TABLE web_sessions (
    id_hash    bytea       PRIMARY KEY CHECK (length(id_hash) = 32),
    who        text        NOT NULL CHECK (who <> ''),
    token_mac  bytea       NOT NULL CHECK (length(token_mac) = 32),
    created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    expires_at timestamptz NOT NULL
);
CREATE INDEX web_sessions_expires_at ON web_sessions (expires_at);

REVOKE ALL ON web_sessions FROM PUBLIC;
GRANT SELECT, INSERT, DELETE ON web_sessions TO logbook_app;

-- A constraint change scans the rows once; it rewrites none and fires no trigger: the access
-- log stays append-only.
ALTER TABLE access_log DROP CONSTRAINT access_log_via_check,
    ADD CONSTRAINT access_log_via_check CHECK (via IN ('proxy_header', 'bearer_token', 'none'));
ALTER TABLE access_log DROP CONSTRAINT access_log_action_check,
    ADD CONSTRAINT access_log_action_check
        CHECK (action IN ('list', 'view', 'download', 'search', 'signin', 'signout'));

-- +goose Down
-- The access log keeps its sign-in records: the old checks come back for new rows only.
ALTER TABLE access_log DROP CONSTRAINT access_log_via_check,
    ADD CONSTRAINT access_log_via_check CHECK (via IN ('proxy_header', 'bearer_token')) NOT VALID;
ALTER TABLE access_log DROP CONSTRAINT access_log_action_check,
    ADD CONSTRAINT access_log_action_check CHECK (action IN ('list', 'view', 'download', 'search')) NOT VALID;
DROP TABLE web_sessions;
