-- Fixes from the security review of schedules and hooks (migration 00100).
--
-- hook_deliveries.signed_at: the X-Logbook-Timestamp a delivery was signed with. A body seen
-- again counts as a replay only with the same timestamp, so a real alert that repeats is not
-- dropped; a replay of a captured request is refused by its timestamp's age.
-- Refused requests (unknown hook, bad signature, stale timestamp, too large) are no longer
-- rows here: they are counted in logbook_hook_refused_total and logged, rate-limited.
--
-- schedule_removals.reason: why a schedule stopped: '' when an admin removed it, otherwise
-- what logbook saw (the admin who set it is no longer in LOGBOOK_ADMINS); removed_by is then
-- 'system'.
--
-- schedule_tick_failures: a tick whose post Slack refused for good (not_in_channel,
-- is_archived, channel_not_found, ...): it is final, no further attempt follows.

-- +goose Up
ALTER TABLE hook_deliveries ADD COLUMN signed_at timestamptz;
ALTER TABLE schedule_removals ADD COLUMN reason text NOT NULL DEFAULT '' CHECK (length(reason) <= 500);

CREATE TABLE schedule_tick_failures (
    schedule_id bigint      NOT NULL,
    tick        timestamptz NOT NULL,
    attempt     integer     NOT NULL CHECK (attempt >= 1),
    error       text        NOT NULL CHECK (length(error) BETWEEN 1 AND 500),
    at          timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (schedule_id, tick),
    FOREIGN KEY (schedule_id, tick) REFERENCES schedule_ticks (schedule_id, tick)
);
CREATE TRIGGER schedule_tick_failures_append_only BEFORE UPDATE OR DELETE OR TRUNCATE ON schedule_tick_failures
    FOR EACH STATEMENT EXECUTE FUNCTION logbook_audit_reject_change();
REVOKE ALL ON schedule_tick_failures FROM PUBLIC;
GRANT SELECT, INSERT ON schedule_tick_failures TO logbook_app;
GRANT SELECT ON schedule_tick_failures TO logbook_auditor;

-- +goose Down
DROP TABLE schedule_tick_failures;
ALTER TABLE schedule_removals DROP COLUMN reason;
ALTER TABLE hook_deliveries DROP COLUMN signed_at;
