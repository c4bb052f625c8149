-- Feedback on replies (issue 54): a person's 👍 or 👎 on a reply is an ordinary event of the
-- session (type feedback). The usage page and `logbook usage` count them per channel and model
-- over a range of days: a partial index over the few feedback events, by time, so that count
-- never scans the rest of the log.

-- +goose Up
CREATE INDEX events_feedback ON events (created_at) WHERE type = 'feedback';

-- +goose Down
DROP INDEX events_feedback;
