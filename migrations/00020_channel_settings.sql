-- Each channel its own agent (issue 31): a channel's settings and its memory, as records.
--
-- channel_settings: what an admin set with `/logbook config <name> <value>` (LOGBOOK_ADMINS).
-- Rows are only appended (a statement trigger refuses UPDATE, DELETE and TRUNCATE); the newest
-- row of a (channel, name) is the setting, value NULL saying it was reset to the environment's
-- default. old_value is the value the row replaced (NULL: the default), so a row alone says
-- who changed what from what to what, and when. Names are bot/settings' (model,
-- instructions, approvals, thread_replies, daily_budget, setup).
--
-- channel_memory: the notes of a channel's memory (`remember`, the agent's tool, and
-- `/logbook remember`): the text, who asked (by_kind 'user' and a Slack user id, or 'agent'
-- and the bot's id with the session it wrote from), when, and from which thread. Rows are
-- only appended; the one change allowed is retention's: logbook_purge_memory empties the text
-- of notes older than the cutoff that no legal hold covers (by channel, by the person who
-- asked, or by the session it came from), under the same rules and lock as
-- logbook_purge_expired. A purged note is never offered again.
-- channel_memory_forgotten: `/logbook forget <id>`: who removed which note, and when; a note
-- forgotten is never offered again. One row per note (the primary key).

-- +goose Up
CREATE TABLE channel_settings (
    id        bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    team      text        NOT NULL CHECK (team <> ''),
    channel   text        NOT NULL CHECK (channel ~ '^[CG][A-Z0-9]{2,}$'),
    name      text        NOT NULL CHECK (name ~ '^[a-z][a-z_]{0,39}$'),
    old_value text        CHECK (length(old_value) <= 8000),
    value     text        CHECK (length(value) <= 8000),
    set_by    text        NOT NULL CHECK (set_by <> ''),
    set_at    timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX channel_settings_channel ON channel_settings (team, channel, name, id DESC);
CREATE TRIGGER channel_settings_append_only BEFORE UPDATE OR DELETE OR TRUNCATE ON channel_settings
    FOR EACH STATEMENT EXECUTE FUNCTION logbook_audit_reject_change();

REVOKE ALL ON channel_settings FROM PUBLIC;
GRANT SELECT, INSERT ON channel_settings TO logbook_app;
GRANT SELECT ON channel_settings TO logbook_auditor;

CREATE TABLE channel_memory (
    id         bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    team       text        NOT NULL CHECK (team <> ''),
    channel    text        NOT NULL CHECK (channel ~ '^[CG][A-Z0-9]{2,}$'),
    text       text        CHECK (length(text) BETWEEN 1 AND 2000),
    by_kind    text        NOT NULL CHECK (by_kind IN ('user', 'agent')),
    by_id      text        NOT NULL CHECK (by_id <> ''),
    session_id uuid,
    thread_ts  text        NOT NULL DEFAULT '',
    created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    purged_at  timestamptz
);
CREATE INDEX channel_memory_channel ON channel_memory (team, channel, id DESC);

-- +goose StatementBegin
CREATE FUNCTION logbook_memory_reject_change() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'UPDATE' AND current_user = 'logbook_retention' AND current_setting('logbook.purge', true) = 'on' THEN
        RETURN NEW;
    END IF;
    RAISE EXCEPTION 'logbook: % on % is not allowed: channel memory is append-only', TG_OP, TG_TABLE_NAME
        USING ERRCODE = 'insufficient_privilege',
              HINT = 'forget a note with /logbook forget <id>; only retention empties its text';
END
$$;
-- +goose StatementEnd
CREATE TRIGGER channel_memory_append_only_row BEFORE UPDATE OR DELETE ON channel_memory
    FOR EACH ROW EXECUTE FUNCTION logbook_memory_reject_change();
CREATE TRIGGER channel_memory_append_only_truncate BEFORE TRUNCATE ON channel_memory
    FOR EACH STATEMENT EXECUTE FUNCTION logbook_memory_reject_change();

CREATE TABLE channel_memory_forgotten (
    note_id      bigint      PRIMARY KEY REFERENCES channel_memory (id),
    forgotten_by text        NOT NULL CHECK (forgotten_by <> ''),
    forgotten_at timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE TRIGGER channel_memory_forgotten_append_only BEFORE UPDATE OR DELETE OR TRUNCATE ON channel_memory_forgotten
    FOR EACH STATEMENT EXECUTE FUNCTION logbook_audit_reject_change();

REVOKE ALL ON channel_memory, channel_memory_forgotten FROM PUBLIC;
GRANT SELECT, INSERT ON channel_memory, channel_memory_forgotten TO logbook_app;
GRANT SELECT ON channel_memory, channel_memory_forgotten TO logbook_auditor;
GRANT SELECT, UPDATE ON channel_memory TO logbook_retention;

-- logbook_purge_memory empties the text of every note created before p_cutoff that no open
-- legal hold covers (scope channel: the note's channel; actor: who asked; session: the
-- session it was written from), and returns how many. It takes the purge lock (7461002), so
-- a hold added meanwhile is seen.
-- +goose StatementBegin
CREATE FUNCTION logbook_purge_memory(p_cutoff timestamptz) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public AS $$
DECLARE
    v_n bigint;
BEGIN
    IF p_cutoff IS NULL OR p_cutoff > clock_timestamp() THEN
        RAISE EXCEPTION 'logbook: purge cutoff % is in the future', p_cutoff USING ERRCODE = '22023';
    END IF;
    PERFORM pg_advisory_xact_lock(7461002);
    PERFORM set_config('logbook.purge', 'on', true);
    UPDATE channel_memory m SET text = NULL, purged_at = clock_timestamp()
     WHERE m.text IS NOT NULL AND m.created_at < p_cutoff
       AND NOT EXISTS (
           SELECT 1 FROM audit_holds h
            WHERE h.action = 'add'
              AND NOT EXISTS (SELECT 1 FROM audit_holds r WHERE r.hold_id = h.hold_id AND r.action = 'remove')
              AND ((h.scope = 'channel' AND h.value = m.channel)
                OR (h.scope = 'actor' AND h.value = m.by_id)
                OR (h.scope = 'session' AND h.value = m.session_id::text)));
    GET DIAGNOSTICS v_n = ROW_COUNT;
    PERFORM set_config('logbook.purge', 'off', true);
    RETURN v_n;
END
$$;
-- +goose StatementEnd
ALTER FUNCTION logbook_purge_memory(timestamptz) OWNER TO logbook_retention;
REVOKE ALL ON FUNCTION logbook_purge_memory(timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION logbook_purge_memory(timestamptz) TO logbook_retention;

-- +goose Down
DROP FUNCTION logbook_purge_memory(timestamptz);
DROP TABLE channel_memory_forgotten;
DROP TABLE channel_memory;
DROP FUNCTION logbook_memory_reject_change();
DROP TABLE channel_settings;
