-- The repository each channel's sandboxes check out and pull requests go to, as set by an
-- admin with `/logbook repo <url> [branch]` (LOGBOOK_ADMINS). A record: rows are only
-- appended (a statement trigger refuses UPDATE, DELETE and TRUNCATE), and the newest row of a
-- channel is its setting; url '' says the channel has none (`/logbook repo off`), whatever
-- LOGBOOK_REPOS says. Who set it, and when, stays.

-- +goose Up
CREATE TABLE channel_repos (
    id       bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    team     text        NOT NULL CHECK (team <> ''),
    channel  text        NOT NULL CHECK (channel ~ '^[CG][A-Z0-9]{2,}$'),
    url      text        NOT NULL CHECK (length(url) <= 2000),
    branch   text        NOT NULL CHECK (length(branch) <= 255),
    set_by   text        NOT NULL CHECK (set_by <> ''),
    set_at   timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX channel_repos_channel ON channel_repos (team, channel, id DESC);
CREATE TRIGGER channel_repos_append_only BEFORE UPDATE OR DELETE OR TRUNCATE ON channel_repos
    FOR EACH STATEMENT EXECUTE FUNCTION logbook_audit_reject_change();

REVOKE ALL ON channel_repos FROM PUBLIC;
GRANT SELECT, INSERT ON channel_repos TO logbook_app;
GRANT SELECT ON channel_repos TO logbook_auditor;

-- +goose Down
DROP TABLE channel_repos;
