-- Sign-in to the web pages through the organisation's OpenID Connect provider (bot/web,
-- LOGBOOK_OIDC_*). A browser signed in that way holds a web_sessions row like one signed in
-- with a token; the row now says which way it was opened and with which role:
--   via         'bearer_token' (the sign-in form; rows written before this migration) or
--               'oidc'
--   auditor     the role given at sign-in: true for auditor, false for reader (a token's role
--               is the token's own, read from LOGBOOK_WEB_TOKENS on every request)
--   token_mac   for 'oidc': HMAC-SHA256 keyed by the OIDC client secret over the issuer, the
--               client id and the group-to-role mapping, so rotating the secret or changing the
--               mapping ends every OIDC sign-in
-- The access log records OIDC sign-ins with via 'oidc' and format 'oidc': a success with who the
-- provider says (the LOGBOOK_OIDC_USER_CLAIM, default email) and status 303; a person the
-- provider vouched for who is in no allowed group with who they are, via 'oidc', auditor false
-- and status 403; every other failure (a bad or missing state, the provider's error, a code or
-- an ID token that does not verify, a nonce that does not match) as who 'anonymous', via 'none'
-- and the status answered.

-- +goose Up
ALTER TABLE web_sessions
    ADD COLUMN via text NOT NULL DEFAULT 'bearer_token' CHECK (via IN ('bearer_token', 'oidc')),
    ADD COLUMN auditor boolean NOT NULL DEFAULT false;

-- A constraint change scans the rows once; it rewrites none and fires no trigger: the access
-- log stays append-only.
ALTER TABLE access_log DROP CONSTRAINT access_log_via_check,
    ADD CONSTRAINT access_log_via_check CHECK (via IN ('proxy_header', 'bearer_token', 'oidc', 'none'));

-- +goose Down
ALTER TABLE access_log DROP CONSTRAINT access_log_via_check,
    ADD CONSTRAINT access_log_via_check CHECK (via IN ('proxy_header', 'bearer_token', 'none')) NOT VALID;
DELETE FROM web_sessions WHERE via = 'oidc';
ALTER TABLE web_sessions DROP COLUMN auditor, DROP COLUMN via;
