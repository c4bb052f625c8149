-- The web pages' usage page (GET /usage, bot/web) is recorded in the access log like every
-- other page: action 'usage', its query (days, channel) and how many rows it showed.

-- +goose Up
ALTER TABLE access_log DROP CONSTRAINT access_log_action_check,
    ADD CONSTRAINT access_log_action_check
        CHECK (action IN ('list', 'view', 'download', 'search', 'signin', 'signout', 'usage'));

-- +goose Down
ALTER TABLE access_log DROP CONSTRAINT access_log_action_check,
    ADD CONSTRAINT access_log_action_check
        CHECK (action IN ('list', 'view', 'download', 'search', 'signin', 'signout')) NOT VALID;
