-- Sessions logbook starts itself (issue 32): on a schedule (`/logbook schedule add`) and on a
-- signed hook (POST /hooks/<name>). Every table here is append-only (statement triggers refuse
-- UPDATE, DELETE and TRUNCATE), so each is a record the audit export lists.
--
-- schedules: a schedule an admin added: its channel, cron spec, prompt, who and when.
-- schedule_removals: `/logbook schedule remove <id>`: who removed which schedule, and when (one
-- row per schedule: the primary key).
--
-- A tick is run exactly once across replicas:
--   schedule_ticks         the claim of one tick (schedule, tick time): the primary key lets one
--                          replica have it. late says it ran after its grace (the replicas were
--                          all down); missed counts the older ticks of that outage that were
--                          skipped (a missed tick is run late at most once: only the newest).
--   schedule_tick_attempts each attempt at a tick's post, by which replica, until when it is
--                          its own (attempt 1 comes with the claim). An attempt whose replica
--                          died is followed by the next one once it has expired; the primary
--                          key lets one replica take it. A retry looks for the earlier
--                          attempt's post (its Slack metadata names the tick) before posting.
--   schedule_tick_runs     the tick's post (Slack ts) and the session it started: the tick is
--                          done.
--
-- hook_deliveries: every request to POST /hooks/<name>: accepted (it started a session, or is
-- starting it), replay (same delivery id or body within the replay window: nothing started),
-- bad_signature, unknown_hook, too_large, failed (accepted, and Slack or the log refused it).
-- hook_delivery_runs: the post and session an accepted delivery started.

-- +goose Up
CREATE TABLE schedules (
    id       bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    team     text        NOT NULL CHECK (team <> ''),
    channel  text        NOT NULL CHECK (channel ~ '^[CG][A-Z0-9]{2,}$'),
    spec     text        NOT NULL CHECK (length(spec) BETWEEN 1 AND 200),
    prompt   text        NOT NULL CHECK (length(prompt) BETWEEN 1 AND 4000),
    added_by text        NOT NULL CHECK (added_by <> ''),
    added_at timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX schedules_channel ON schedules (team, channel, id);

CREATE TABLE schedule_removals (
    schedule_id bigint      PRIMARY KEY REFERENCES schedules (id),
    removed_by  text        NOT NULL CHECK (removed_by <> ''),
    removed_at  timestamptz NOT NULL DEFAULT clock_timestamp()
);

CREATE TABLE schedule_ticks (
    schedule_id bigint      NOT NULL REFERENCES schedules (id),
    tick        timestamptz NOT NULL,
    late        boolean     NOT NULL,
    missed      integer     NOT NULL DEFAULT 0 CHECK (missed >= 0),
    claimed_by  text        NOT NULL CHECK (claimed_by <> ''),
    claimed_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (schedule_id, tick)
);
CREATE INDEX schedule_ticks_claimed_at ON schedule_ticks (claimed_at);
CREATE INDEX schedule_ticks_tick ON schedule_ticks (tick);

CREATE TABLE schedule_tick_attempts (
    schedule_id bigint      NOT NULL,
    tick        timestamptz NOT NULL,
    attempt     integer     NOT NULL CHECK (attempt >= 1),
    owner       text        NOT NULL CHECK (owner <> ''),
    expires_at  timestamptz NOT NULL,
    at          timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (schedule_id, tick, attempt),
    FOREIGN KEY (schedule_id, tick) REFERENCES schedule_ticks (schedule_id, tick)
);

CREATE TABLE schedule_tick_runs (
    schedule_id bigint      NOT NULL,
    tick        timestamptz NOT NULL,
    ts          text        NOT NULL CHECK (ts <> ''),
    session_id  uuid        NOT NULL,
    found       boolean     NOT NULL DEFAULT false, -- the post was an earlier attempt's, found in Slack
    at          timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (schedule_id, tick),
    FOREIGN KEY (schedule_id, tick) REFERENCES schedule_ticks (schedule_id, tick)
);
CREATE INDEX schedule_tick_runs_at ON schedule_tick_runs (at);

CREATE TABLE hook_deliveries (
    id          bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    hook        text        NOT NULL CHECK (length(hook) BETWEEN 1 AND 100),
    delivery_id text        NOT NULL DEFAULT '' CHECK (length(delivery_id) <= 200),
    body_sha256 text        NOT NULL DEFAULT '',
    body_bytes  bigint      NOT NULL DEFAULT 0,
    outcome     text        NOT NULL CHECK (outcome IN ('accepted', 'replay', 'bad_signature', 'unknown_hook', 'too_large', 'failed')),
    channel     text        NOT NULL DEFAULT '',
    remote_addr text        NOT NULL DEFAULT '' CHECK (length(remote_addr) <= 200),
    reason      text        NOT NULL DEFAULT '' CHECK (length(reason) <= 500),
    -- of: for a 'failed' row, the accepted delivery that failed (the sender may retry it).
    of          bigint      REFERENCES hook_deliveries (id),
    at          timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX hook_deliveries_of ON hook_deliveries (of) WHERE of IS NOT NULL;
CREATE INDEX hook_deliveries_replay ON hook_deliveries (hook, at) WHERE outcome = 'accepted';
CREATE INDEX hook_deliveries_at ON hook_deliveries (at);

CREATE TABLE hook_delivery_runs (
    delivery    bigint      PRIMARY KEY REFERENCES hook_deliveries (id),
    ts          text        NOT NULL CHECK (ts <> ''),
    session_id  uuid        NOT NULL,
    at          timestamptz NOT NULL DEFAULT clock_timestamp()
);

CREATE TRIGGER schedules_append_only BEFORE UPDATE OR DELETE OR TRUNCATE ON schedules
    FOR EACH STATEMENT EXECUTE FUNCTION logbook_audit_reject_change();
CREATE TRIGGER schedule_removals_append_only BEFORE UPDATE OR DELETE OR TRUNCATE ON schedule_removals
    FOR EACH STATEMENT EXECUTE FUNCTION logbook_audit_reject_change();
CREATE TRIGGER schedule_ticks_append_only BEFORE UPDATE OR DELETE OR TRUNCATE ON schedule_ticks
    FOR EACH STATEMENT EXECUTE FUNCTION logbook_audit_reject_change();
CREATE TRIGGER schedule_tick_attempts_append_only BEFORE UPDATE OR DELETE OR TRUNCATE ON schedule_tick_attempts
    FOR EACH STATEMENT EXECUTE FUNCTION logbook_audit_reject_change();
CREATE TRIGGER schedule_tick_runs_append_only BEFORE UPDATE OR DELETE OR TRUNCATE ON schedule_tick_runs
    FOR EACH STATEMENT EXECUTE FUNCTION logbook_audit_reject_change();
CREATE TRIGGER hook_deliveries_append_only BEFORE UPDATE OR DELETE OR TRUNCATE ON hook_deliveries
    FOR EACH STATEMENT EXECUTE FUNCTION logbook_audit_reject_change();
CREATE TRIGGER hook_delivery_runs_append_only BEFORE UPDATE OR DELETE OR TRUNCATE ON hook_delivery_runs
    FOR EACH STATEMENT EXECUTE FUNCTION logbook_audit_reject_change();

REVOKE ALL ON schedules, schedule_removals, schedule_ticks, schedule_tick_attempts, schedule_tick_runs,
    hook_deliveries, hook_delivery_runs FROM PUBLIC;
GRANT SELECT, INSERT ON schedules, schedule_removals, schedule_ticks, schedule_tick_attempts, schedule_tick_runs,
    hook_deliveries, hook_delivery_runs TO logbook_app;
GRANT SELECT ON schedules, schedule_removals, schedule_ticks, schedule_tick_attempts, schedule_tick_runs,
    hook_deliveries, hook_delivery_runs TO logbook_auditor;

-- +goose Down
DROP TABLE hook_delivery_runs;
DROP TABLE hook_deliveries;
DROP TABLE schedule_tick_runs;
DROP TABLE schedule_tick_attempts;
DROP TABLE schedule_ticks;
DROP TABLE schedule_removals;
DROP TABLE schedules;
