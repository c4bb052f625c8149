-- The web's channel settings page (issue 49): an auditor's view of a channel's effective
-- settings and their history is in the access log as 'channel_settings'.

-- +goose Up
ALTER TABLE access_log DROP CONSTRAINT access_log_action_check,
    ADD CONSTRAINT access_log_action_check
        CHECK (action IN ('list', 'view', 'download', 'search', 'signin', 'signout', 'usage', 'mcp_connect', 'automations',
                          'channel_settings'));

-- +goose Down
ALTER TABLE access_log DROP CONSTRAINT access_log_action_check,
    ADD CONSTRAINT access_log_action_check
        CHECK (action IN ('list', 'view', 'download', 'search', 'signin', 'signout', 'usage', 'mcp_connect', 'automations')) NOT VALID;
