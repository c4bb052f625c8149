-- Schedules and hooks that keep their own record (issue 48).
--
-- opening_posts: an opening's post (bot.Starter: a schedule's tick, a hook's delivery), as the
-- log knows it. 'posting' is appended just before chat.postMessage, naming the attempt
-- (marker, also in the post's metadata); 'posted' just after, with the post's ts. A retry
-- finds its earlier post here: posted → its ts, reused; no posting at all → nothing was sent;
-- posting without posted (a crash, or the database gone, between Slack's answer and the
-- record) → one narrow look at the channel around the posting's time. Slack's history is no
-- longer paged through.
--
-- automation_runs: every run of a schedule's tick or a hook's delivery, ended: ok (its post
-- and session) or failed (why). The run history (/logbook schedule list, GET /automations) and
-- the count of failures in a row (LOGBOOK_AUTOMATION_MAX_FAILURES) are read from it.
--
-- The run history's web page (GET /automations, bot/web) is in the access log like every other
-- page: action 'automations'.
--
-- automation_pauses: a schedule or hook paused (by the system, after failures in a row, with
-- the reason) or resumed (by an admin: /logbook schedule resume). The newest row of a schedule
-- or hook is its state; an advisory lock (LockAutomationSeed) keeps one pause per run of
-- failures however many replicas see it.

-- +goose Up
CREATE TABLE opening_posts (
    kind   text        NOT NULL CHECK (length(kind) BETWEEN 1 AND 100),
    key    text        NOT NULL CHECK (length(key) BETWEEN 1 AND 400),
    marker text        NOT NULL CHECK (length(marker) BETWEEN 1 AND 100),
    state  text        NOT NULL CHECK (state IN ('posting', 'posted')),
    channel text       NOT NULL,
    ts     text        NOT NULL DEFAULT '' CHECK ((state = 'posted') = (ts <> '')),
    at     timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (kind, key, marker, state)
);

CREATE TABLE automation_runs (
    id         bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    kind       text        NOT NULL CHECK (kind IN ('schedule', 'hook')),
    name       text        NOT NULL CHECK (length(name) BETWEEN 1 AND 100),
    team       text        NOT NULL DEFAULT '',
    channel    text        NOT NULL,
    ref        text        NOT NULL DEFAULT '' CHECK (length(ref) <= 400),
    ok         boolean     NOT NULL,
    late       boolean     NOT NULL DEFAULT false,
    error      text        NOT NULL DEFAULT '' CHECK (length(error) <= 500),
    ts         text        NOT NULL DEFAULT '',
    session_id uuid,
    at         timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX automation_runs_by_name ON automation_runs (kind, name, id);
CREATE INDEX automation_runs_at ON automation_runs (at);

CREATE TABLE automation_pauses (
    id     bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    kind   text        NOT NULL CHECK (kind IN ('schedule', 'hook')),
    name   text        NOT NULL CHECK (length(name) BETWEEN 1 AND 100),
    action text        NOT NULL CHECK (action IN ('paused', 'resumed')),
    channel text       NOT NULL DEFAULT '',
    actor  text        NOT NULL CHECK (actor <> ''),
    reason text        NOT NULL DEFAULT '' CHECK (length(reason) <= 500),
    at     timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX automation_pauses_by_name ON automation_pauses (kind, name, id);

-- A run's cost is its session's model spend.
CREATE INDEX model_spend_session ON model_spend (session_id) WHERE session_id IS NOT NULL;

CREATE TRIGGER opening_posts_append_only BEFORE UPDATE OR DELETE OR TRUNCATE ON opening_posts
    FOR EACH STATEMENT EXECUTE FUNCTION logbook_audit_reject_change();
CREATE TRIGGER automation_runs_append_only BEFORE UPDATE OR DELETE OR TRUNCATE ON automation_runs
    FOR EACH STATEMENT EXECUTE FUNCTION logbook_audit_reject_change();
CREATE TRIGGER automation_pauses_append_only BEFORE UPDATE OR DELETE OR TRUNCATE ON automation_pauses
    FOR EACH STATEMENT EXECUTE FUNCTION logbook_audit_reject_change();
REVOKE ALL ON opening_posts, automation_runs, automation_pauses FROM PUBLIC;
GRANT SELECT, INSERT ON opening_posts, automation_runs, automation_pauses TO logbook_app;
GRANT SELECT ON opening_posts, automation_runs, automation_pauses TO logbook_auditor;

ALTER TABLE access_log DROP CONSTRAINT access_log_action_check,
    ADD CONSTRAINT access_log_action_check
        CHECK (action IN ('list', 'view', 'download', 'search', 'signin', 'signout', 'usage', 'mcp_connect', 'automations'));

-- +goose Down
ALTER TABLE access_log DROP CONSTRAINT access_log_action_check,
    ADD CONSTRAINT access_log_action_check
        CHECK (action IN ('list', 'view', 'download', 'search', 'signin', 'signout', 'usage', 'mcp_connect')) NOT VALID;
DROP INDEX model_spend_session;
DROP TABLE automation_pauses;
DROP TABLE automation_runs;
DROP TABLE opening_posts;
