-- Code channels (issue 54): a session that works on the repository may get a Slack code
-- channel of its own; every message there is the session's. The mapping is the session's
-- code_channel_created event itself (its payload's channel_id): a partial index over those few
-- events lets the gateway find a code channel's session in the same statement that looks for a
-- thread's (session.Store.SessionByThread), without a second table to keep in step.

-- +goose Up
CREATE INDEX events_code_channel ON events ((payload->>'channel_id')) WHERE type = 'code_channel_created';

-- +goose Down
DROP INDEX events_code_channel;
