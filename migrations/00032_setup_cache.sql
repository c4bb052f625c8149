-- The channels' setup step (bot/setup.go): the workspace a successful setup left (the files
-- git does not track, as a tar.gz kept content-addressed in the file store, files table) for
-- a repository's commit and a setup command. key is sha256(repository URL, commit, command);
-- the newest row of a key is used. Rows are only appended; a purge of the file's content
-- makes the next sandbox run the setup again.

-- +goose Up
CREATE TABLE setup_cache (
    id         bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    key        text        NOT NULL CHECK (key ~ '^[0-9a-f]{64}$'),
    sha256     text        NOT NULL CHECK (sha256 ~ '^[0-9a-f]{64}$'),
    size       bigint      NOT NULL CHECK (size >= 0),
    session_id uuid        NOT NULL,
    at         timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX setup_cache_key ON setup_cache (key, id DESC);
CREATE TRIGGER setup_cache_append_only BEFORE UPDATE OR DELETE OR TRUNCATE ON setup_cache
    FOR EACH STATEMENT EXECUTE FUNCTION logbook_audit_reject_change();

REVOKE ALL ON setup_cache FROM PUBLIC;
GRANT SELECT, INSERT ON setup_cache TO logbook_app;
GRANT SELECT ON setup_cache TO logbook_auditor;

-- +goose Down
DROP TABLE setup_cache;
