-- One poller per followed pull request across the fleet, and GitHub's rate limit kept by all
-- (issue 48). Without them every replica polled every followed pull request: ten replicas at
-- LOGBOOK_FOLLOWUP_POLL=60s made 2,400 requests an hour per pull request, and two pull requests
-- used up a token's 5,000.
--
-- followup_polls: who polls a pull request (poller, a replica's name) and when its next look is
-- due (due_at, on a fixed phase of the interval). The poller claims the look once it is due and
-- moves due_at on; another replica claims it only once it is overdue by the takeover's margin
-- (its poller died or stalled), and is its poller from then on. A pull request no longer
-- followed leaves its row, deleted once it is a day overdue.
--
-- github_pauses: until when no replica polls GitHub (until), and why: the token's rate limit
-- is used up until x-ratelimit-reset, or a secondary limit said retry-after. A pause is only
-- ever lengthened.

-- +goose Up
CREATE TABLE followup_polls (
    repo   text NOT NULL,
    number integer NOT NULL CHECK (number > 0),
    poller text NOT NULL CHECK (length(poller) BETWEEN 1 AND 200),
    due_at timestamptz NOT NULL,
    PRIMARY KEY (repo, number)
);
CREATE INDEX followup_polls_due ON followup_polls (due_at);

CREATE TABLE github_pauses (
    name   text PRIMARY KEY CHECK (length(name) BETWEEN 1 AND 100),
    until  timestamptz NOT NULL,
    reason text NOT NULL
);

GRANT SELECT, INSERT, UPDATE, DELETE ON followup_polls, github_pauses TO logbook_app;
GRANT SELECT ON followup_polls, github_pauses TO logbook_auditor;

-- +goose Down
DROP TABLE github_pauses;
DROP TABLE followup_polls;
