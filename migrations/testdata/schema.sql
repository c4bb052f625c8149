-- The schema of a database migrated to the latest migration, read from PostgreSQL's catalogs
-- by TestSchemaGolden (migrations/schemadump_test.go). Do not edit: change a migration, then
-- rewrite this file with
--     go test ./migrations -run TestSchemaGolden -update
-- and commit the two together, so that the diff shows what the migration did.

-- schemas

CREATE SCHEMA public;

-- extensions

-- (none)

-- types

CREATE TYPE public.logbook_appended AS (
    seq bigint,
    event_id uuid,
    created_at timestamp with time zone,
    payload_hash bytea,
    prev_hash bytea,
    hash bytea,
    "position" bigint,
    duplicate boolean,
    type text,
    actor_kind text,
    actor_id text,
    payload jsonb,
    sanitized boolean
);

-- tables, views and sequences

CREATE TABLE public.access_log (
    id bigint GENERATED ALWAYS AS IDENTITY NOT NULL,
    at timestamp with time zone DEFAULT clock_timestamp() NOT NULL,
    who text NOT NULL,
    via text NOT NULL,
    auditor boolean DEFAULT false NOT NULL,
    action text NOT NULL,
    session_id uuid,
    format text,
    query text,
    results integer,
    status integer NOT NULL,
    remote_addr text DEFAULT ''::text NOT NULL,
    user_agent text DEFAULT ''::text NOT NULL,
    CONSTRAINT access_log_action_check CHECK ((action = ANY (ARRAY['list'::text, 'view'::text, 'download'::text, 'search'::text, 'signin'::text, 'signout'::text, 'usage'::text, 'mcp_connect'::text, 'automations'::text, 'channel_settings'::text]))),
    CONSTRAINT access_log_pkey PRIMARY KEY (id),
    CONSTRAINT access_log_via_check CHECK ((via = ANY (ARRAY['proxy_header'::text, 'bearer_token'::text, 'oidc'::text, 'none'::text]))),
    CONSTRAINT access_log_who_check CHECK ((who <> ''::text))
);
CREATE INDEX access_log_at ON public.access_log USING btree (at);
CREATE INDEX access_log_who_at ON public.access_log USING btree (who, at);
CREATE TRIGGER access_log_append_only_row BEFORE DELETE OR UPDATE ON public.access_log FOR EACH ROW EXECUTE FUNCTION public.logbook_reject_change();
CREATE TRIGGER access_log_append_only_truncate BEFORE TRUNCATE ON public.access_log FOR EACH STATEMENT EXECUTE FUNCTION public.logbook_reject_change();
GRANT SELECT, INSERT ON TABLE public.access_log TO logbook_app;
GRANT SELECT ON TABLE public.access_log TO logbook_auditor;

CREATE SEQUENCE public.access_log_id_seq AS bigint START WITH 1 INCREMENT BY 1 MINVALUE 1 MAXVALUE 9223372036854775807 CACHE 1;
ALTER SEQUENCE public.access_log_id_seq OWNED BY public.access_log.id; -- the column's identity

CREATE TABLE public.audit_access (
    id uuid NOT NULL,
    at timestamp with time zone DEFAULT clock_timestamp() NOT NULL,
    who text NOT NULL,
    who_kind text NOT NULL,
    db_user text DEFAULT SESSION_USER NOT NULL,
    action text NOT NULL,
    filters jsonb DEFAULT '{}'::jsonb NOT NULL,
    who_source text DEFAULT ''::text NOT NULL,
    CONSTRAINT audit_access_action_check CHECK ((action ~ '^[a-z][a-z_-]{0,63}$'::text)),
    CONSTRAINT audit_access_pkey PRIMARY KEY (id),
    CONSTRAINT audit_access_who_check CHECK ((who <> ''::text)),
    CONSTRAINT audit_access_who_kind_check CHECK ((who_kind = ANY (ARRAY['person'::text, 'system'::text])))
);
CREATE INDEX audit_access_at ON public.audit_access USING btree (at);
CREATE TRIGGER audit_access_append_only BEFORE DELETE OR UPDATE OR TRUNCATE ON public.audit_access FOR EACH STATEMENT EXECUTE FUNCTION public.logbook_audit_reject_change();
GRANT SELECT, INSERT ON TABLE public.audit_access TO logbook_auditor;

CREATE TABLE public.audit_holds (
    change_id bigint GENERATED ALWAYS AS IDENTITY NOT NULL,
    hold_id uuid NOT NULL,
    action text NOT NULL,
    scope text NOT NULL,
    value text NOT NULL,
    reason text NOT NULL,
    who text NOT NULL,
    at timestamp with time zone DEFAULT clock_timestamp() NOT NULL,
    CONSTRAINT audit_holds_action_check CHECK ((action = ANY (ARRAY['add'::text, 'remove'::text]))),
    CONSTRAINT audit_holds_once UNIQUE (hold_id, action),
    CONSTRAINT audit_holds_pkey PRIMARY KEY (change_id),
    CONSTRAINT audit_holds_reason_check CHECK ((reason <> ''::text)),
    CONSTRAINT audit_holds_scope_check CHECK ((scope = ANY (ARRAY['session'::text, 'channel'::text, 'actor'::text]))),
    CONSTRAINT audit_holds_value_check CHECK ((value <> ''::text)),
    CONSTRAINT audit_holds_who_check CHECK ((who <> ''::text))
);
CREATE TRIGGER audit_holds_append_only BEFORE DELETE OR UPDATE OR TRUNCATE ON public.audit_holds FOR EACH STATEMENT EXECUTE FUNCTION public.logbook_audit_reject_change();
GRANT SELECT, INSERT ON TABLE public.audit_holds TO logbook_auditor;
GRANT SELECT ON TABLE public.audit_holds TO logbook_retention;

CREATE SEQUENCE public.audit_holds_change_id_seq AS bigint START WITH 1 INCREMENT BY 1 MINVALUE 1 MAXVALUE 9223372036854775807 CACHE 1;
ALTER SEQUENCE public.audit_holds_change_id_seq OWNED BY public.audit_holds.change_id; -- the column's identity

CREATE TABLE public.audit_purges (
    id bigint GENERATED ALWAYS AS IDENTITY NOT NULL,
    session_id uuid NOT NULL,
    from_seq bigint NOT NULL,
    to_seq bigint NOT NULL,
    purged bigint NOT NULL,
    head_seq bigint NOT NULL,
    head_hash bytea NOT NULL,
    last_event_at timestamp with time zone NOT NULL,
    cutoff timestamp with time zone NOT NULL,
    reason text NOT NULL,
    who text NOT NULL,
    at timestamp with time zone DEFAULT clock_timestamp() NOT NULL,
    CONSTRAINT audit_purges_pkey PRIMARY KEY (id),
    CONSTRAINT audit_purges_reason_check CHECK ((reason <> ''::text)),
    CONSTRAINT audit_purges_session_id_fkey FOREIGN KEY (session_id) REFERENCES public.sessions(id),
    CONSTRAINT audit_purges_who_check CHECK ((who <> ''::text))
);
CREATE INDEX audit_purges_session ON public.audit_purges USING btree (session_id);
CREATE TRIGGER audit_purges_append_only BEFORE DELETE OR UPDATE OR TRUNCATE ON public.audit_purges FOR EACH STATEMENT EXECUTE FUNCTION public.logbook_audit_reject_change();
GRANT SELECT ON TABLE public.audit_purges TO logbook_auditor;
GRANT SELECT, INSERT ON TABLE public.audit_purges TO logbook_retention;

CREATE SEQUENCE public.audit_purges_id_seq AS bigint START WITH 1 INCREMENT BY 1 MINVALUE 1 MAXVALUE 9223372036854775807 CACHE 1;
ALTER SEQUENCE public.audit_purges_id_seq OWNED BY public.audit_purges.id; -- the column's identity

CREATE TABLE public.audit_runs (
    run_id uuid NOT NULL,
    schedule text NOT NULL,
    window_start timestamp with time zone NOT NULL,
    window_end timestamp with time zone NOT NULL,
    status text NOT NULL,
    at timestamp with time zone DEFAULT clock_timestamp() NOT NULL,
    node text NOT NULL,
    events bigint,
    files jsonb,
    error text,
    CONSTRAINT audit_runs_pkey PRIMARY KEY (run_id, status),
    CONSTRAINT audit_runs_schedule_check CHECK ((schedule <> ''::text)),
    CONSTRAINT audit_runs_status_check CHECK ((status = ANY (ARRAY['started'::text, 'succeeded'::text, 'failed'::text, 'interrupted'::text]))),
    CONSTRAINT audit_runs_window CHECK ((window_end > window_start))
);
CREATE INDEX audit_runs_by_schedule ON public.audit_runs USING btree (schedule, window_end);
CREATE UNIQUE INDEX audit_runs_once ON public.audit_runs USING btree (schedule, window_start) WHERE (status = 'succeeded'::text);
CREATE TRIGGER audit_runs_append_only BEFORE DELETE OR UPDATE OR TRUNCATE ON public.audit_runs FOR EACH STATEMENT EXECUTE FUNCTION public.logbook_audit_reject_change();
GRANT SELECT, INSERT ON TABLE public.audit_runs TO logbook_auditor;

CREATE TABLE public.automation_pauses (
    id bigint GENERATED ALWAYS AS IDENTITY NOT NULL,
    kind text NOT NULL,
    name text NOT NULL,
    action text NOT NULL,
    channel text DEFAULT ''::text NOT NULL,
    actor text NOT NULL,
    reason text DEFAULT ''::text NOT NULL,
    at timestamp with time zone DEFAULT clock_timestamp() NOT NULL,
    CONSTRAINT automation_pauses_action_check CHECK ((action = ANY (ARRAY['paused'::text, 'resumed'::text]))),
    CONSTRAINT automation_pauses_actor_check CHECK ((actor <> ''::text)),
    CONSTRAINT automation_pauses_kind_check CHECK ((kind = ANY (ARRAY['schedule'::text, 'hook'::text]))),
    CONSTRAINT automation_pauses_name_check CHECK (((length(name) >= 1) AND (length(name) <= 100))),
    CONSTRAINT automation_pauses_pkey PRIMARY KEY (id),
    CONSTRAINT automation_pauses_reason_check CHECK ((length(reason) <= 500))
);
CREATE INDEX automation_pauses_by_name ON public.automation_pauses USING btree (kind, name, id);
CREATE TRIGGER automation_pauses_append_only BEFORE DELETE OR UPDATE OR TRUNCATE ON public.automation_pauses FOR EACH STATEMENT EXECUTE FUNCTION public.logbook_audit_reject_change();
GRANT SELECT, INSERT ON TABLE public.automation_pauses TO logbook_app;
GRANT SELECT ON TABLE public.automation_pauses TO logbook_auditor;

CREATE SEQUENCE public.automation_pauses_id_seq AS bigint START WITH 1 INCREMENT BY 1 MINVALUE 1 MAXVALUE 9223372036854775807 CACHE 1;
ALTER SEQUENCE public.automation_pauses_id_seq OWNED BY public.automation_pauses.id; -- the column's identity

CREATE TABLE public.automation_runs (
    id bigint GENERATED ALWAYS AS IDENTITY NOT NULL,
    kind text NOT NULL,
    name text NOT NULL,
    team text DEFAULT ''::text NOT NULL,
    channel text NOT NULL,
    ref text DEFAULT ''::text NOT NULL,
    ok boolean NOT NULL,
    late boolean DEFAULT false NOT NULL,
    error text DEFAULT ''::text NOT NULL,
    ts text DEFAULT ''::text NOT NULL,
    session_id uuid,
    at timestamp with time zone DEFAULT clock_timestamp() NOT NULL,
    CONSTRAINT automation_runs_error_check CHECK ((length(error) <= 500)),
    CONSTRAINT automation_runs_kind_check CHECK ((kind = ANY (ARRAY['schedule'::text, 'hook'::text]))),
    CONSTRAINT automation_runs_name_check CHECK (((length(name) >= 1) AND (length(name) <= 100))),
    CONSTRAINT automation_runs_pkey PRIMARY KEY (id),
    CONSTRAINT automation_runs_ref_check CHECK ((length(ref) <= 400))
);
CREATE INDEX automation_runs_at ON public.automation_runs USING btree (at);
CREATE INDEX automation_runs_by_name ON public.automation_runs USING btree (kind, name, id);
CREATE TRIGGER automation_runs_append_only BEFORE DELETE OR UPDATE OR TRUNCATE ON public.automation_runs FOR EACH STATEMENT EXECUTE FUNCTION public.logbook_audit_reject_change();
GRANT SELECT, INSERT ON TABLE public.automation_runs TO logbook_app;
GRANT SELECT ON TABLE public.automation_runs TO logbook_auditor;

CREATE SEQUENCE public.automation_runs_id_seq AS bigint START WITH 1 INCREMENT BY 1 MINVALUE 1 MAXVALUE 9223372036854775807 CACHE 1;
ALTER SEQUENCE public.automation_runs_id_seq OWNED BY public.automation_runs.id; -- the column's identity

CREATE TABLE public.budget_raises (
    id bigint GENERATED ALWAYS AS IDENTITY NOT NULL,
    day date NOT NULL,
    scope text NOT NULL,
    subject text NOT NULL,
    channel text NOT NULL,
    amount bigint NOT NULL,
    raised_by text NOT NULL,
    at timestamp with time zone DEFAULT clock_timestamp() NOT NULL,
    CONSTRAINT budget_raises_amount_check CHECK ((amount > 0)),
    CONSTRAINT budget_raises_channel_check CHECK ((channel <> ''::text)),
    CONSTRAINT budget_raises_pkey PRIMARY KEY (id),
    CONSTRAINT budget_raises_raised_by_check CHECK ((raised_by <> ''::text)),
    CONSTRAINT budget_raises_scope_check CHECK ((scope = ANY (ARRAY['channel'::text, 'person'::text]))),
    CONSTRAINT budget_raises_subject_check CHECK ((subject <> ''::text))
);
CREATE INDEX budget_raises_subject ON public.budget_raises USING btree (scope, subject, day);
CREATE TRIGGER budget_raises_append_only BEFORE DELETE OR UPDATE OR TRUNCATE ON public.budget_raises FOR EACH STATEMENT EXECUTE FUNCTION public.logbook_audit_reject_change();
GRANT SELECT, INSERT ON TABLE public.budget_raises TO logbook_app;
GRANT SELECT ON TABLE public.budget_raises TO logbook_auditor;

CREATE SEQUENCE public.budget_raises_id_seq AS bigint START WITH 1 INCREMENT BY 1 MINVALUE 1 MAXVALUE 9223372036854775807 CACHE 1;
ALTER SEQUENCE public.budget_raises_id_seq OWNED BY public.budget_raises.id; -- the column's identity

CREATE TABLE public.channel_memory (
    id bigint GENERATED ALWAYS AS IDENTITY NOT NULL,
    team text NOT NULL,
    channel text NOT NULL,
    text text,
    by_kind text NOT NULL,
    by_id text NOT NULL,
    session_id uuid,
    thread_ts text DEFAULT ''::text NOT NULL,
    call_id text,
    created_at timestamp with time zone DEFAULT clock_timestamp() NOT NULL,
    purged_at timestamp with time zone,
    tsv tsvector GENERATED ALWAYS AS (to_tsvector('english'::regconfig, text)) STORED,
    CONSTRAINT channel_memory_by_id_check CHECK ((by_id <> ''::text)),
    CONSTRAINT channel_memory_by_kind_check CHECK ((by_kind = ANY (ARRAY['user'::text, 'agent'::text]))),
    CONSTRAINT channel_memory_call_id_check CHECK ((call_id <> ''::text)),
    CONSTRAINT channel_memory_channel_check CHECK ((channel ~ '^[CG][A-Z0-9]{2,}$'::text)),
    CONSTRAINT channel_memory_pkey PRIMARY KEY (id),
    CONSTRAINT channel_memory_team_check CHECK ((team <> ''::text)),
    CONSTRAINT channel_memory_text_check CHECK (((length(text) >= 1) AND (length(text) <= 2000)))
);
CREATE UNIQUE INDEX channel_memory_call ON public.channel_memory USING btree (session_id, call_id) WHERE (call_id IS NOT NULL);
CREATE INDEX channel_memory_channel ON public.channel_memory USING btree (team, channel, id DESC);
CREATE INDEX channel_memory_tsv ON public.channel_memory USING gin (tsv);
CREATE TRIGGER channel_memory_append_only_row BEFORE DELETE OR UPDATE ON public.channel_memory FOR EACH ROW EXECUTE FUNCTION public.logbook_memory_reject_change();
CREATE TRIGGER channel_memory_append_only_truncate BEFORE TRUNCATE ON public.channel_memory FOR EACH STATEMENT EXECUTE FUNCTION public.logbook_memory_reject_change();
GRANT SELECT, INSERT ON TABLE public.channel_memory TO logbook_app;
GRANT SELECT ON TABLE public.channel_memory TO logbook_auditor;
GRANT SELECT, UPDATE ON TABLE public.channel_memory TO logbook_retention;

CREATE TABLE public.channel_memory_forgotten (
    note_id bigint NOT NULL,
    forgotten_by text NOT NULL,
    forgotten_at timestamp with time zone DEFAULT clock_timestamp() NOT NULL,
    CONSTRAINT channel_memory_forgotten_forgotten_by_check CHECK ((forgotten_by <> ''::text)),
    CONSTRAINT channel_memory_forgotten_note_id_fkey FOREIGN KEY (note_id) REFERENCES public.channel_memory(id),
    CONSTRAINT channel_memory_forgotten_pkey PRIMARY KEY (note_id)
);
CREATE TRIGGER channel_memory_forgotten_append_only BEFORE DELETE OR UPDATE OR TRUNCATE ON public.channel_memory_forgotten FOR EACH STATEMENT EXECUTE FUNCTION public.logbook_audit_reject_change();
GRANT SELECT, INSERT ON TABLE public.channel_memory_forgotten TO logbook_app;
GRANT SELECT ON TABLE public.channel_memory_forgotten TO logbook_auditor;

CREATE SEQUENCE public.channel_memory_id_seq AS bigint START WITH 1 INCREMENT BY 1 MINVALUE 1 MAXVALUE 9223372036854775807 CACHE 1;
ALTER SEQUENCE public.channel_memory_id_seq OWNED BY public.channel_memory.id; -- the column's identity

CREATE TABLE public.channel_repos (
    id bigint GENERATED ALWAYS AS IDENTITY NOT NULL,
    team text NOT NULL,
    channel text NOT NULL,
    url text NOT NULL,
    branch text NOT NULL,
    set_by text NOT NULL,
    set_at timestamp with time zone DEFAULT clock_timestamp() NOT NULL,
    CONSTRAINT channel_repos_branch_check CHECK ((length(branch) <= 255)),
    CONSTRAINT channel_repos_channel_check CHECK ((channel ~ '^[CG][A-Z0-9]{2,}$'::text)),
    CONSTRAINT channel_repos_pkey PRIMARY KEY (id),
    CONSTRAINT channel_repos_set_by_check CHECK ((set_by <> ''::text)),
    CONSTRAINT channel_repos_team_check CHECK ((team <> ''::text)),
    CONSTRAINT channel_repos_url_check CHECK ((length(url) <= 2000))
);
CREATE INDEX channel_repos_by_channel ON public.channel_repos USING btree (channel, id DESC);
CREATE INDEX channel_repos_channel ON public.channel_repos USING btree (team, channel, id DESC);
CREATE TRIGGER channel_repos_append_only BEFORE DELETE OR UPDATE OR TRUNCATE ON public.channel_repos FOR EACH STATEMENT EXECUTE FUNCTION public.logbook_audit_reject_change();
GRANT SELECT, INSERT ON TABLE public.channel_repos TO logbook_app;
GRANT SELECT ON TABLE public.channel_repos TO logbook_auditor;

CREATE SEQUENCE public.channel_repos_id_seq AS bigint START WITH 1 INCREMENT BY 1 MINVALUE 1 MAXVALUE 9223372036854775807 CACHE 1;
ALTER SEQUENCE public.channel_repos_id_seq OWNED BY public.channel_repos.id; -- the column's identity

CREATE TABLE public.channel_settings (
    id bigint GENERATED ALWAYS AS IDENTITY NOT NULL,
    team text NOT NULL,
    channel text NOT NULL,
    name text NOT NULL,
    old_value text,
    value text,
    set_by text NOT NULL,
    set_at timestamp with time zone DEFAULT clock_timestamp() NOT NULL,
    CONSTRAINT channel_settings_channel_check CHECK ((channel ~ '^[CG][A-Z0-9]{2,}$'::text)),
    CONSTRAINT channel_settings_name_check CHECK ((name ~ '^[a-z][a-z_]{0,39}$'::text)),
    CONSTRAINT channel_settings_old_value_check CHECK ((length(old_value) <= 8000)),
    CONSTRAINT channel_settings_pkey PRIMARY KEY (id),
    CONSTRAINT channel_settings_set_by_check CHECK ((set_by <> ''::text)),
    CONSTRAINT channel_settings_team_check CHECK ((team <> ''::text)),
    CONSTRAINT channel_settings_value_check CHECK ((length(value) <= 8000))
);
CREATE INDEX channel_settings_channel ON public.channel_settings USING btree (team, channel, name, id DESC);
CREATE TRIGGER channel_settings_append_only BEFORE DELETE OR UPDATE OR TRUNCATE ON public.channel_settings FOR EACH STATEMENT EXECUTE FUNCTION public.logbook_audit_reject_change();
GRANT SELECT, INSERT ON TABLE public.channel_settings TO logbook_app;
GRANT SELECT ON TABLE public.channel_settings TO logbook_auditor;

CREATE SEQUENCE public.channel_settings_id_seq AS bigint START WITH 1 INCREMENT BY 1 MINVALUE 1 MAXVALUE 9223372036854775807 CACHE 1;
ALTER SEQUENCE public.channel_settings_id_seq OWNED BY public.channel_settings.id; -- the column's identity

CREATE TABLE public.events (
    session_id uuid NOT NULL,
    seq bigint NOT NULL,
    event_id uuid NOT NULL,
    type text NOT NULL,
    actor_kind text NOT NULL,
    actor_id text NOT NULL,
    created_at timestamp with time zone NOT NULL,
    payload jsonb,
    payload_hash bytea NOT NULL,
    idempotency_key text,
    prev_hash bytea NOT NULL,
    hash bytea NOT NULL,
    sanitized boolean DEFAULT false NOT NULL,
    "position" bigint GENERATED ALWAYS AS IDENTITY NOT NULL,
    tx_id xid8 DEFAULT pg_current_xact_id() NOT NULL,
    CONSTRAINT events_actor_kind_check CHECK ((actor_kind = ANY (ARRAY['user'::text, 'bot'::text, 'system'::text, 'sandbox'::text, 'github'::text]))) NOT VALID,
    CONSTRAINT events_event_id UNIQUE (event_id),
    CONSTRAINT events_pkey PRIMARY KEY (session_id, seq),
    CONSTRAINT events_position UNIQUE ("position"),
    CONSTRAINT events_seq_check CHECK ((seq >= 1)),
    CONSTRAINT events_type_check CHECK ((type ~ '^[a-z][a-z_]{0,63}$'::text))
);
CREATE INDEX events_actor_time ON public.events USING btree (actor_kind, actor_id, created_at);
CREATE INDEX events_code_channel ON public.events USING btree (((payload ->> 'channel_id'::text))) WHERE (type = 'code_channel_created'::text);
CREATE INDEX events_feedback ON public.events USING btree (created_at) WHERE (type = 'feedback'::text);
CREATE INDEX events_followup_ended ON public.events USING btree (session_id) WHERE (type = 'followup_ended'::text);
CREATE INDEX events_followup_subscribed ON public.events USING btree (((payload ->> 'repo'::text)), ((payload ->> 'branch'::text))) WHERE (type = 'followup_subscribed'::text);
CREATE UNIQUE INDEX events_idempotency ON public.events USING btree (session_id, idempotency_key) WHERE (idempotency_key IS NOT NULL);
CREATE INDEX events_replay_started ON public.events USING btree (((payload ->> 'original'::text))) WHERE (type = 'replay_started'::text);
CREATE INDEX events_session_forked ON public.events USING btree (((payload ->> 'parent'::text))) WHERE (type = 'session_forked'::text);
CREATE INDEX events_time ON public.events USING btree (created_at);
CREATE INDEX events_tx_position ON public.events USING btree (tx_id, "position");
CREATE TRIGGER events_append_only_row BEFORE DELETE OR UPDATE ON public.events FOR EACH ROW EXECUTE FUNCTION public.logbook_reject_change();
CREATE TRIGGER events_append_only_truncate BEFORE TRUNCATE ON public.events FOR EACH STATEMENT EXECUTE FUNCTION public.logbook_reject_change();
GRANT SELECT, INSERT ON TABLE public.events TO logbook_app;
GRANT SELECT ON TABLE public.events TO logbook_auditor;
GRANT SELECT, UPDATE, DELETE ON TABLE public.events TO logbook_retention;

CREATE SEQUENCE public.events_position_seq AS bigint START WITH 1 INCREMENT BY 1 MINVALUE 1 MAXVALUE 9223372036854775807 CACHE 1;
ALTER SEQUENCE public.events_position_seq OWNED BY public.events."position"; -- the column's identity

CREATE TABLE public.file_blobs (
    sha256 text NOT NULL,
    size bigint NOT NULL,
    content bytea,
    in_bucket boolean DEFAULT false NOT NULL,
    created_at timestamp with time zone DEFAULT clock_timestamp() NOT NULL,
    purged_at timestamp with time zone,
    CONSTRAINT file_blobs_check CHECK ((in_bucket OR ((content IS NOT NULL) AND (length(content) = size)))),
    CONSTRAINT file_blobs_pkey PRIMARY KEY (sha256),
    CONSTRAINT file_blobs_sha256_check CHECK ((sha256 ~ '^[0-9a-f]{64}$'::text)),
    CONSTRAINT file_blobs_size_check CHECK ((size >= 0))
);
GRANT SELECT, INSERT ON TABLE public.file_blobs TO logbook_app;
GRANT SELECT ON TABLE public.file_blobs TO logbook_auditor;
GRANT SELECT, UPDATE, DELETE ON TABLE public.file_blobs TO logbook_retention;
GRANT UPDATE (purged_at) ON TABLE public.file_blobs TO logbook_app;

CREATE TABLE public.file_refs (
    session_id uuid NOT NULL,
    sha256 text NOT NULL,
    CONSTRAINT file_refs_pkey PRIMARY KEY (session_id, sha256),
    CONSTRAINT file_refs_session_id_fkey FOREIGN KEY (session_id) REFERENCES public.sessions(id),
    CONSTRAINT file_refs_sha256_fkey FOREIGN KEY (sha256) REFERENCES public.file_blobs(sha256)
);
CREATE INDEX file_refs_sha256 ON public.file_refs USING btree (sha256);
GRANT SELECT, INSERT ON TABLE public.file_refs TO logbook_app;
GRANT SELECT ON TABLE public.file_refs TO logbook_auditor;
GRANT SELECT, UPDATE, DELETE ON TABLE public.file_refs TO logbook_retention;

CREATE TABLE public.followup_looks (
    repo text NOT NULL,
    number integer NOT NULL,
    look_at timestamp with time zone NOT NULL,
    CONSTRAINT followup_looks_number_check CHECK ((number > 0)),
    CONSTRAINT followup_looks_pkey PRIMARY KEY (repo, number)
);
GRANT SELECT, INSERT, UPDATE, DELETE ON TABLE public.followup_looks TO logbook_app;
GRANT SELECT ON TABLE public.followup_looks TO logbook_auditor;

CREATE TABLE public.followup_polls (
    repo text NOT NULL,
    number integer NOT NULL,
    poller text NOT NULL,
    due_at timestamp with time zone NOT NULL,
    CONSTRAINT followup_polls_number_check CHECK ((number > 0)),
    CONSTRAINT followup_polls_pkey PRIMARY KEY (repo, number),
    CONSTRAINT followup_polls_poller_check CHECK (((length(poller) >= 1) AND (length(poller) <= 200)))
);
CREATE INDEX followup_polls_due ON public.followup_polls USING btree (due_at);
GRANT SELECT, INSERT, UPDATE, DELETE ON TABLE public.followup_polls TO logbook_app;
GRANT SELECT ON TABLE public.followup_polls TO logbook_auditor;

CREATE TABLE public.github_deliveries (
    delivery_id text NOT NULL,
    body_sha256 bytea NOT NULL,
    received_at timestamp with time zone DEFAULT clock_timestamp() NOT NULL,
    expires_at timestamp with time zone NOT NULL,
    CONSTRAINT github_deliveries_body_sha256_check CHECK ((length(body_sha256) = 32)),
    CONSTRAINT github_deliveries_body_sha256_key UNIQUE (body_sha256),
    CONSTRAINT github_deliveries_delivery_id_check CHECK (((length(delivery_id) >= 1) AND (length(delivery_id) <= 100))),
    CONSTRAINT github_deliveries_pkey PRIMARY KEY (delivery_id)
);
CREATE INDEX github_deliveries_expires ON public.github_deliveries USING btree (expires_at);
GRANT SELECT, INSERT, DELETE ON TABLE public.github_deliveries TO logbook_app;
GRANT SELECT ON TABLE public.github_deliveries TO logbook_auditor;

CREATE TABLE public.github_pauses (
    name text NOT NULL,
    until timestamp with time zone NOT NULL,
    reason text NOT NULL,
    CONSTRAINT github_pauses_name_check CHECK (((length(name) >= 1) AND (length(name) <= 100))),
    CONSTRAINT github_pauses_pkey PRIMARY KEY (name)
);
GRANT SELECT, INSERT, UPDATE, DELETE ON TABLE public.github_pauses TO logbook_app;
GRANT SELECT ON TABLE public.github_pauses TO logbook_auditor;

CREATE TABLE public.goose_db_version (
    id integer GENERATED BY DEFAULT AS IDENTITY NOT NULL,
    version_id bigint NOT NULL,
    is_applied boolean NOT NULL,
    tstamp timestamp without time zone DEFAULT now() NOT NULL,
    CONSTRAINT goose_db_version_pkey PRIMARY KEY (id)
);

CREATE SEQUENCE public.goose_db_version_id_seq AS integer START WITH 1 INCREMENT BY 1 MINVALUE 1 MAXVALUE 2147483647 CACHE 1;
ALTER SEQUENCE public.goose_db_version_id_seq OWNED BY public.goose_db_version.id; -- the column's identity

CREATE TABLE public.hook_deliveries (
    id bigint GENERATED ALWAYS AS IDENTITY NOT NULL,
    hook text NOT NULL,
    delivery_id text DEFAULT ''::text NOT NULL,
    body_sha256 text DEFAULT ''::text NOT NULL,
    body_bytes bigint DEFAULT 0 NOT NULL,
    outcome text NOT NULL,
    channel text DEFAULT ''::text NOT NULL,
    remote_addr text DEFAULT ''::text NOT NULL,
    reason text DEFAULT ''::text NOT NULL,
    of bigint,
    at timestamp with time zone DEFAULT clock_timestamp() NOT NULL,
    signed_at timestamp with time zone,
    CONSTRAINT hook_deliveries_delivery_id_check CHECK ((length(delivery_id) <= 200)),
    CONSTRAINT hook_deliveries_hook_check CHECK (((length(hook) >= 1) AND (length(hook) <= 100))),
    CONSTRAINT hook_deliveries_of_fkey FOREIGN KEY (of) REFERENCES public.hook_deliveries(id),
    CONSTRAINT hook_deliveries_outcome_check CHECK ((outcome = ANY (ARRAY['accepted'::text, 'replay'::text, 'bad_signature'::text, 'unknown_hook'::text, 'too_large'::text, 'failed'::text]))),
    CONSTRAINT hook_deliveries_pkey PRIMARY KEY (id),
    CONSTRAINT hook_deliveries_reason_check CHECK ((length(reason) <= 500)),
    CONSTRAINT hook_deliveries_remote_addr_check CHECK ((length(remote_addr) <= 200))
);
CREATE INDEX hook_deliveries_at ON public.hook_deliveries USING btree (at);
CREATE INDEX hook_deliveries_of ON public.hook_deliveries USING btree (of) WHERE (of IS NOT NULL);
CREATE INDEX hook_deliveries_replay ON public.hook_deliveries USING btree (hook, at) WHERE (outcome = 'accepted'::text);
CREATE TRIGGER hook_deliveries_append_only BEFORE DELETE OR UPDATE OR TRUNCATE ON public.hook_deliveries FOR EACH STATEMENT EXECUTE FUNCTION public.logbook_audit_reject_change();
GRANT SELECT, INSERT ON TABLE public.hook_deliveries TO logbook_app;
GRANT SELECT ON TABLE public.hook_deliveries TO logbook_auditor;

CREATE SEQUENCE public.hook_deliveries_id_seq AS bigint START WITH 1 INCREMENT BY 1 MINVALUE 1 MAXVALUE 9223372036854775807 CACHE 1;
ALTER SEQUENCE public.hook_deliveries_id_seq OWNED BY public.hook_deliveries.id; -- the column's identity

CREATE TABLE public.hook_delivery_runs (
    delivery bigint NOT NULL,
    ts text NOT NULL,
    session_id uuid NOT NULL,
    at timestamp with time zone DEFAULT clock_timestamp() NOT NULL,
    CONSTRAINT hook_delivery_runs_delivery_fkey FOREIGN KEY (delivery) REFERENCES public.hook_deliveries(id),
    CONSTRAINT hook_delivery_runs_pkey PRIMARY KEY (delivery),
    CONSTRAINT hook_delivery_runs_ts_check CHECK ((ts <> ''::text))
);
CREATE TRIGGER hook_delivery_runs_append_only BEFORE DELETE OR UPDATE OR TRUNCATE ON public.hook_delivery_runs FOR EACH STATEMENT EXECUTE FUNCTION public.logbook_audit_reject_change();
GRANT SELECT, INSERT ON TABLE public.hook_delivery_runs TO logbook_app;
GRANT SELECT ON TABLE public.hook_delivery_runs TO logbook_auditor;

CREATE TABLE public.leases (
    session_id uuid NOT NULL,
    owner text NOT NULL,
    epoch bigint NOT NULL,
    expires_at timestamp with time zone NOT NULL,
    claimed boolean DEFAULT false NOT NULL,
    CONSTRAINT leases_pkey PRIMARY KEY (session_id),
    CONSTRAINT leases_session_id_fkey FOREIGN KEY (session_id) REFERENCES public.sessions(id)
);
CREATE TRIGGER leases_keep_epoch AFTER INSERT OR UPDATE OF epoch ON public.leases FOR EACH ROW EXECUTE FUNCTION public.logbook_keep_lease_epoch();
GRANT SELECT, INSERT, UPDATE ON TABLE public.leases TO logbook_app;
GRANT SELECT ON TABLE public.leases TO logbook_auditor;
GRANT SELECT ON TABLE public.leases TO logbook_retention;

CREATE TABLE public.mcp_connects (
    state_hash bytea NOT NULL,
    server text NOT NULL,
    channel text NOT NULL,
    who text NOT NULL,
    sealed bytea NOT NULL,
    expires_at timestamp with time zone NOT NULL,
    CONSTRAINT mcp_connects_channel_check CHECK ((channel <> ''::text)),
    CONSTRAINT mcp_connects_pkey PRIMARY KEY (state_hash),
    CONSTRAINT mcp_connects_server_check CHECK ((server <> ''::text)),
    CONSTRAINT mcp_connects_who_check CHECK ((who <> ''::text))
);
GRANT SELECT, INSERT, DELETE ON TABLE public.mcp_connects TO logbook_app;

CREATE TABLE public.mcp_tokens (
    server text NOT NULL,
    channel text NOT NULL,
    sealed bytea NOT NULL,
    connected_by text NOT NULL,
    connected_at timestamp with time zone NOT NULL,
    refreshed_at timestamp with time zone,
    CONSTRAINT mcp_tokens_channel_check CHECK ((channel <> ''::text)),
    CONSTRAINT mcp_tokens_connected_by_check CHECK ((connected_by <> ''::text)),
    CONSTRAINT mcp_tokens_pkey PRIMARY KEY (server, channel),
    CONSTRAINT mcp_tokens_server_check CHECK ((server <> ''::text))
);
GRANT SELECT, INSERT, UPDATE ON TABLE public.mcp_tokens TO logbook_app;
GRANT SELECT (channel) ON TABLE public.mcp_tokens TO logbook_auditor;
GRANT SELECT (connected_at) ON TABLE public.mcp_tokens TO logbook_auditor;
GRANT SELECT (connected_by) ON TABLE public.mcp_tokens TO logbook_auditor;
GRANT SELECT (server) ON TABLE public.mcp_tokens TO logbook_auditor;

CREATE TABLE public.mcp_tool_descriptions (
    channel text NOT NULL,
    server text NOT NULL,
    tool text NOT NULL,
    sha256 bytea NOT NULL,
    description text NOT NULL,
    first_seen timestamp with time zone NOT NULL,
    changed_at timestamp with time zone,
    CONSTRAINT mcp_tool_descriptions_channel_check CHECK ((channel <> ''::text)),
    CONSTRAINT mcp_tool_descriptions_pkey PRIMARY KEY (channel, server, tool),
    CONSTRAINT mcp_tool_descriptions_server_check CHECK ((server <> ''::text)),
    CONSTRAINT mcp_tool_descriptions_sha256_check CHECK ((length(sha256) = 32)),
    CONSTRAINT mcp_tool_descriptions_tool_check CHECK ((tool <> ''::text))
);
GRANT SELECT, INSERT, UPDATE ON TABLE public.mcp_tool_descriptions TO logbook_app;

CREATE TABLE public.model_spend (
    id bigint GENERATED ALWAYS AS IDENTITY NOT NULL,
    call_id uuid NOT NULL,
    kind text NOT NULL,
    day date NOT NULL,
    channel text NOT NULL,
    person text NOT NULL,
    session_id uuid,
    turn bigint DEFAULT 0 NOT NULL,
    purpose text DEFAULT ''::text NOT NULL,
    provider text DEFAULT ''::text NOT NULL,
    model text DEFAULT ''::text NOT NULL,
    input_tokens bigint DEFAULT 0 NOT NULL,
    output_tokens bigint DEFAULT 0 NOT NULL,
    cache_read_tokens bigint DEFAULT 0 NOT NULL,
    cache_write_tokens bigint DEFAULT 0 NOT NULL,
    cost_micros bigint NOT NULL,
    reason text DEFAULT ''::text NOT NULL,
    at timestamp with time zone DEFAULT clock_timestamp() NOT NULL,
    source text DEFAULT ''::text NOT NULL,
    CONSTRAINT model_spend_cache_read_tokens_check CHECK ((cache_read_tokens >= 0)),
    CONSTRAINT model_spend_cache_write_tokens_check CHECK ((cache_write_tokens >= 0)),
    CONSTRAINT model_spend_channel_check CHECK ((channel <> ''::text)),
    CONSTRAINT model_spend_cost_micros_check CHECK ((cost_micros >= 0)),
    CONSTRAINT model_spend_input_tokens_check CHECK ((input_tokens >= 0)),
    CONSTRAINT model_spend_kind_check CHECK ((kind = ANY (ARRAY['hold'::text, 'charge'::text, 'refused'::text]))),
    CONSTRAINT model_spend_output_tokens_check CHECK ((output_tokens >= 0)),
    CONSTRAINT model_spend_pkey PRIMARY KEY (id),
    CONSTRAINT model_spend_reason_check CHECK ((length(reason) <= 500)),
    CONSTRAINT model_spend_source_check CHECK ((source = ANY (ARRAY[''::text, 'provider'::text, 'estimate'::text, 'none'::text])))
);
CREATE UNIQUE INDEX model_spend_call ON public.model_spend USING btree (call_id, kind);
CREATE INDEX model_spend_channel_day ON public.model_spend USING btree (channel, day);
CREATE INDEX model_spend_day ON public.model_spend USING btree (day);
CREATE INDEX model_spend_person_day ON public.model_spend USING btree (person, day);
CREATE INDEX model_spend_session ON public.model_spend USING btree (session_id) WHERE (session_id IS NOT NULL);
CREATE TRIGGER model_spend_append_only BEFORE DELETE OR UPDATE OR TRUNCATE ON public.model_spend FOR EACH STATEMENT EXECUTE FUNCTION public.logbook_audit_reject_change();
GRANT SELECT, INSERT ON TABLE public.model_spend TO logbook_app;
GRANT SELECT ON TABLE public.model_spend TO logbook_auditor;

CREATE SEQUENCE public.model_spend_id_seq AS bigint START WITH 1 INCREMENT BY 1 MINVALUE 1 MAXVALUE 9223372036854775807 CACHE 1;
ALTER SEQUENCE public.model_spend_id_seq OWNED BY public.model_spend.id; -- the column's identity

CREATE TABLE public.opening_posts (
    kind text NOT NULL,
    key text NOT NULL,
    marker text NOT NULL,
    state text NOT NULL,
    channel text NOT NULL,
    ts text DEFAULT ''::text NOT NULL,
    at timestamp with time zone DEFAULT clock_timestamp() NOT NULL,
    CONSTRAINT opening_posts_check CHECK (((state = 'posted'::text) = (ts <> ''::text))),
    CONSTRAINT opening_posts_key_check CHECK (((length(key) >= 1) AND (length(key) <= 400))),
    CONSTRAINT opening_posts_kind_check CHECK (((length(kind) >= 1) AND (length(kind) <= 100))),
    CONSTRAINT opening_posts_marker_check CHECK (((length(marker) >= 1) AND (length(marker) <= 100))),
    CONSTRAINT opening_posts_pkey PRIMARY KEY (kind, key, marker, state),
    CONSTRAINT opening_posts_state_check CHECK ((state = ANY (ARRAY['posting'::text, 'posted'::text])))
);
CREATE TRIGGER opening_posts_append_only BEFORE DELETE OR UPDATE OR TRUNCATE ON public.opening_posts FOR EACH STATEMENT EXECUTE FUNCTION public.logbook_audit_reject_change();
GRANT SELECT, INSERT ON TABLE public.opening_posts TO logbook_app;
GRANT SELECT ON TABLE public.opening_posts TO logbook_auditor;

CREATE TABLE public.replica_peers (
    owner text NOT NULL,
    addr text NOT NULL,
    token text NOT NULL,
    recorded_at timestamp with time zone DEFAULT clock_timestamp() NOT NULL,
    alive_until timestamp with time zone,
    CONSTRAINT replica_peers_addr_check CHECK ((addr <> ''::text)),
    CONSTRAINT replica_peers_pkey PRIMARY KEY (owner),
    CONSTRAINT replica_peers_token_check CHECK ((length(token) >= 32))
);
GRANT SELECT, INSERT, UPDATE, DELETE ON TABLE public.replica_peers TO logbook_app;

CREATE TABLE public.schedule_removals (
    schedule_id bigint NOT NULL,
    removed_by text NOT NULL,
    removed_at timestamp with time zone DEFAULT clock_timestamp() NOT NULL,
    reason text DEFAULT ''::text NOT NULL,
    CONSTRAINT schedule_removals_pkey PRIMARY KEY (schedule_id),
    CONSTRAINT schedule_removals_reason_check CHECK ((length(reason) <= 500)),
    CONSTRAINT schedule_removals_removed_by_check CHECK ((removed_by <> ''::text)),
    CONSTRAINT schedule_removals_schedule_id_fkey FOREIGN KEY (schedule_id) REFERENCES public.schedules(id)
);
CREATE TRIGGER schedule_removals_append_only BEFORE DELETE OR UPDATE OR TRUNCATE ON public.schedule_removals FOR EACH STATEMENT EXECUTE FUNCTION public.logbook_audit_reject_change();
GRANT SELECT, INSERT ON TABLE public.schedule_removals TO logbook_app;
GRANT SELECT ON TABLE public.schedule_removals TO logbook_auditor;

CREATE TABLE public.schedule_tick_attempts (
    schedule_id bigint NOT NULL,
    tick timestamp with time zone NOT NULL,
    attempt integer NOT NULL,
    owner text NOT NULL,
    expires_at timestamp with time zone NOT NULL,
    at timestamp with time zone DEFAULT clock_timestamp() NOT NULL,
    CONSTRAINT schedule_tick_attempts_attempt_check CHECK ((attempt >= 1)),
    CONSTRAINT schedule_tick_attempts_owner_check CHECK ((owner <> ''::text)),
    CONSTRAINT schedule_tick_attempts_pkey PRIMARY KEY (schedule_id, tick, attempt),
    CONSTRAINT schedule_tick_attempts_schedule_id_tick_fkey FOREIGN KEY (schedule_id, tick) REFERENCES public.schedule_ticks(schedule_id, tick)
);
CREATE TRIGGER schedule_tick_attempts_append_only BEFORE DELETE OR UPDATE OR TRUNCATE ON public.schedule_tick_attempts FOR EACH STATEMENT EXECUTE FUNCTION public.logbook_audit_reject_change();
GRANT SELECT, INSERT ON TABLE public.schedule_tick_attempts TO logbook_app;
GRANT SELECT ON TABLE public.schedule_tick_attempts TO logbook_auditor;

CREATE TABLE public.schedule_tick_failures (
    schedule_id bigint NOT NULL,
    tick timestamp with time zone NOT NULL,
    attempt integer NOT NULL,
    error text NOT NULL,
    at timestamp with time zone DEFAULT clock_timestamp() NOT NULL,
    CONSTRAINT schedule_tick_failures_attempt_check CHECK ((attempt >= 1)),
    CONSTRAINT schedule_tick_failures_error_check CHECK (((length(error) >= 1) AND (length(error) <= 500))),
    CONSTRAINT schedule_tick_failures_pkey PRIMARY KEY (schedule_id, tick),
    CONSTRAINT schedule_tick_failures_schedule_id_tick_fkey FOREIGN KEY (schedule_id, tick) REFERENCES public.schedule_ticks(schedule_id, tick)
);
CREATE TRIGGER schedule_tick_failures_append_only BEFORE DELETE OR UPDATE OR TRUNCATE ON public.schedule_tick_failures FOR EACH STATEMENT EXECUTE FUNCTION public.logbook_audit_reject_change();
GRANT SELECT, INSERT ON TABLE public.schedule_tick_failures TO logbook_app;
GRANT SELECT ON TABLE public.schedule_tick_failures TO logbook_auditor;

CREATE TABLE public.schedule_tick_runs (
    schedule_id bigint NOT NULL,
    tick timestamp with time zone NOT NULL,
    ts text NOT NULL,
    session_id uuid NOT NULL,
    found boolean DEFAULT false NOT NULL,
    at timestamp with time zone DEFAULT clock_timestamp() NOT NULL,
    CONSTRAINT schedule_tick_runs_pkey PRIMARY KEY (schedule_id, tick),
    CONSTRAINT schedule_tick_runs_schedule_id_tick_fkey FOREIGN KEY (schedule_id, tick) REFERENCES public.schedule_ticks(schedule_id, tick),
    CONSTRAINT schedule_tick_runs_ts_check CHECK ((ts <> ''::text))
);
CREATE INDEX schedule_tick_runs_at ON public.schedule_tick_runs USING btree (at);
CREATE TRIGGER schedule_tick_runs_append_only BEFORE DELETE OR UPDATE OR TRUNCATE ON public.schedule_tick_runs FOR EACH STATEMENT EXECUTE FUNCTION public.logbook_audit_reject_change();
GRANT SELECT, INSERT ON TABLE public.schedule_tick_runs TO logbook_app;
GRANT SELECT ON TABLE public.schedule_tick_runs TO logbook_auditor;

CREATE TABLE public.schedule_ticks (
    schedule_id bigint NOT NULL,
    tick timestamp with time zone NOT NULL,
    late boolean NOT NULL,
    missed integer DEFAULT 0 NOT NULL,
    claimed_by text NOT NULL,
    claimed_at timestamp with time zone DEFAULT clock_timestamp() NOT NULL,
    CONSTRAINT schedule_ticks_claimed_by_check CHECK ((claimed_by <> ''::text)),
    CONSTRAINT schedule_ticks_missed_check CHECK ((missed >= 0)),
    CONSTRAINT schedule_ticks_pkey PRIMARY KEY (schedule_id, tick),
    CONSTRAINT schedule_ticks_schedule_id_fkey FOREIGN KEY (schedule_id) REFERENCES public.schedules(id)
);
CREATE INDEX schedule_ticks_claimed_at ON public.schedule_ticks USING btree (claimed_at);
CREATE INDEX schedule_ticks_tick ON public.schedule_ticks USING btree (tick);
CREATE TRIGGER schedule_ticks_append_only BEFORE DELETE OR UPDATE OR TRUNCATE ON public.schedule_ticks FOR EACH STATEMENT EXECUTE FUNCTION public.logbook_audit_reject_change();
GRANT SELECT, INSERT ON TABLE public.schedule_ticks TO logbook_app;
GRANT SELECT ON TABLE public.schedule_ticks TO logbook_auditor;

CREATE TABLE public.schedules (
    id bigint GENERATED ALWAYS AS IDENTITY NOT NULL,
    team text NOT NULL,
    channel text NOT NULL,
    spec text NOT NULL,
    prompt text NOT NULL,
    added_by text NOT NULL,
    added_at timestamp with time zone DEFAULT clock_timestamp() NOT NULL,
    CONSTRAINT schedules_added_by_check CHECK ((added_by <> ''::text)),
    CONSTRAINT schedules_channel_check CHECK ((channel ~ '^[CG][A-Z0-9]{2,}$'::text)),
    CONSTRAINT schedules_pkey PRIMARY KEY (id),
    CONSTRAINT schedules_prompt_check CHECK (((length(prompt) >= 1) AND (length(prompt) <= 4000))),
    CONSTRAINT schedules_spec_check CHECK (((length(spec) >= 1) AND (length(spec) <= 200))),
    CONSTRAINT schedules_team_check CHECK ((team <> ''::text))
);
CREATE INDEX schedules_channel ON public.schedules USING btree (team, channel, id);
CREATE TRIGGER schedules_append_only BEFORE DELETE OR UPDATE OR TRUNCATE ON public.schedules FOR EACH STATEMENT EXECUTE FUNCTION public.logbook_audit_reject_change();
GRANT SELECT, INSERT ON TABLE public.schedules TO logbook_app;
GRANT SELECT ON TABLE public.schedules TO logbook_auditor;

CREATE SEQUENCE public.schedules_id_seq AS bigint START WITH 1 INCREMENT BY 1 MINVALUE 1 MAXVALUE 9223372036854775807 CACHE 1;
ALTER SEQUENCE public.schedules_id_seq OWNED BY public.schedules.id; -- the column's identity

CREATE TABLE public.search_cursor (
    name text NOT NULL,
    tx_id xid8 NOT NULL,
    "position" bigint NOT NULL,
    CONSTRAINT search_cursor_pkey PRIMARY KEY (name)
);
GRANT SELECT, INSERT, UPDATE, DELETE ON TABLE public.search_cursor TO logbook_app;
GRANT SELECT ON TABLE public.search_cursor TO logbook_auditor;

CREATE TABLE public.search_docs (
    session_id uuid NOT NULL,
    seq bigint NOT NULL,
    kind text NOT NULL,
    channel_id text NOT NULL,
    thread_ts text NOT NULL,
    ts text DEFAULT ''::text NOT NULL,
    actor_kind text NOT NULL,
    actor_id text NOT NULL,
    actor_name text DEFAULT ''::text NOT NULL,
    created_at timestamp with time zone NOT NULL,
    edited boolean DEFAULT false NOT NULL,
    deleted boolean DEFAULT false NOT NULL,
    body text NOT NULL,
    tsv tsvector GENERATED ALWAYS AS (to_tsvector('english'::regconfig, body)) STORED,
    CONSTRAINT search_docs_kind_check CHECK ((kind = ANY (ARRAY['user'::text, 'assistant'::text, 'tool'::text]))),
    CONSTRAINT search_docs_pkey PRIMARY KEY (session_id, seq),
    CONSTRAINT search_docs_session_id_fkey FOREIGN KEY (session_id) REFERENCES public.sessions(id)
);
CREATE INDEX search_docs_actor_name ON public.search_docs USING btree (lower(actor_name));
CREATE INDEX search_docs_actor_time ON public.search_docs USING btree (actor_id, created_at);
CREATE INDEX search_docs_channel_time ON public.search_docs USING btree (channel_id, created_at);
CREATE INDEX search_docs_session_ts ON public.search_docs USING btree (session_id, ts);
CREATE INDEX search_docs_tsv ON public.search_docs USING gin (tsv);
CREATE INDEX search_docs_walk ON public.search_docs USING btree (created_at, session_id, seq) INCLUDE (kind);
GRANT SELECT, INSERT, UPDATE, DELETE ON TABLE public.search_docs TO logbook_app;
GRANT SELECT ON TABLE public.search_docs TO logbook_auditor;
GRANT SELECT, DELETE ON TABLE public.search_docs TO logbook_retention;

CREATE TABLE public.search_sessions (
    session_id uuid NOT NULL,
    team_id text NOT NULL,
    channel_id text NOT NULL,
    thread_ts text NOT NULL,
    title text DEFAULT ''::text NOT NULL,
    first_text text DEFAULT ''::text NOT NULL,
    started_at timestamp with time zone NOT NULL,
    last_event_at timestamp with time zone NOT NULL,
    messages integer DEFAULT 0 NOT NULL,
    CONSTRAINT search_sessions_pkey PRIMARY KEY (session_id),
    CONSTRAINT search_sessions_session_id_fkey FOREIGN KEY (session_id) REFERENCES public.sessions(id)
);
CREATE INDEX search_sessions_recent ON public.search_sessions USING btree (last_event_at DESC);
CREATE INDEX search_sessions_thread ON public.search_sessions USING btree (channel_id, thread_ts);
GRANT SELECT, INSERT, UPDATE, DELETE ON TABLE public.search_sessions TO logbook_app;
GRANT SELECT ON TABLE public.search_sessions TO logbook_auditor;
GRANT SELECT, UPDATE ON TABLE public.search_sessions TO logbook_retention;

CREATE TABLE public.session_work (
    session_id uuid NOT NULL,
    last_message_seq bigint DEFAULT 0 NOT NULL,
    last_message_at timestamp with time zone,
    answered_seq bigint DEFAULT 0 NOT NULL,
    answered_through bigint DEFAULT 0 NOT NULL,
    awaiting_until timestamp with time zone,
    awaiting_through bigint DEFAULT 0 NOT NULL,
    pending boolean,
    last_message_hour timestamp without time zone,
    head_seq bigint DEFAULT 0 NOT NULL,
    head_at timestamp with time zone,
    head_prev bytea,
    head_hash bytea DEFAULT '\x0000000000000000000000000000000000000000000000000000000000000000'::bytea NOT NULL,
    lease_epoch bigint,
    CONSTRAINT session_work_pkey PRIMARY KEY (session_id),
    CONSTRAINT session_work_session_id_fkey FOREIGN KEY (session_id) REFERENCES public.sessions(id)
) WITH (fillfactor=50);
CREATE INDEX session_work_pending ON public.session_work USING btree (last_message_hour) WHERE pending;
GRANT SELECT, INSERT, UPDATE ON TABLE public.session_work TO logbook_app;
GRANT SELECT ON TABLE public.session_work TO logbook_auditor;

CREATE TABLE public.sessions (
    id uuid NOT NULL,
    team_id text NOT NULL,
    channel_id text NOT NULL,
    thread_ts text NOT NULL,
    created_at timestamp with time zone DEFAULT clock_timestamp() NOT NULL,
    by_thread boolean DEFAULT true,
    kind text DEFAULT 'thread'::text NOT NULL,
    CONSTRAINT sessions_by_thread_true CHECK (by_thread),
    CONSTRAINT sessions_key_not_empty CHECK (((team_id <> ''::text) AND (channel_id <> ''::text) AND (thread_ts <> ''::text))),
    CONSTRAINT sessions_kind CHECK ((kind = ANY (ARRAY['thread'::text, 'replay'::text]))),
    CONSTRAINT sessions_pkey PRIMARY KEY (id),
    CONSTRAINT sessions_replay_thread CHECK (((kind = 'replay'::text) = (thread_ts ~~ 'replay-%'::text))),
    CONSTRAINT sessions_thread_key UNIQUE (team_id, channel_id, thread_ts)
);
CREATE INDEX sessions_channel_thread ON public.sessions USING btree (channel_id, thread_ts, created_at, id);
CREATE UNIQUE INDEX sessions_thread_once ON public.sessions USING btree (channel_id, thread_ts) WHERE by_thread;
CREATE TRIGGER sessions_append_only_row BEFORE DELETE OR UPDATE ON public.sessions FOR EACH ROW EXECUTE FUNCTION public.logbook_reject_change();
CREATE TRIGGER sessions_append_only_truncate BEFORE TRUNCATE ON public.sessions FOR EACH STATEMENT EXECUTE FUNCTION public.logbook_reject_change();
GRANT SELECT, INSERT ON TABLE public.sessions TO logbook_app;
GRANT SELECT ON TABLE public.sessions TO logbook_auditor;
GRANT SELECT, UPDATE, DELETE ON TABLE public.sessions TO logbook_retention;

CREATE TABLE public.setup_cache (
    id bigint GENERATED ALWAYS AS IDENTITY NOT NULL,
    key text NOT NULL,
    sha256 text NOT NULL,
    size bigint NOT NULL,
    session_id uuid NOT NULL,
    at timestamp with time zone DEFAULT clock_timestamp() NOT NULL,
    CONSTRAINT setup_cache_key_check CHECK ((key ~ '^[0-9a-f]{64}$'::text)),
    CONSTRAINT setup_cache_pkey PRIMARY KEY (id),
    CONSTRAINT setup_cache_sha256_check CHECK ((sha256 ~ '^[0-9a-f]{64}$'::text)),
    CONSTRAINT setup_cache_size_check CHECK ((size >= 0))
);
CREATE INDEX setup_cache_key ON public.setup_cache USING btree (key, id DESC);
CREATE TRIGGER setup_cache_append_only BEFORE DELETE OR UPDATE OR TRUNCATE ON public.setup_cache FOR EACH STATEMENT EXECUTE FUNCTION public.logbook_audit_reject_change();
GRANT SELECT, INSERT ON TABLE public.setup_cache TO logbook_app;
GRANT SELECT ON TABLE public.setup_cache TO logbook_auditor;

CREATE SEQUENCE public.setup_cache_id_seq AS bigint START WITH 1 INCREMENT BY 1 MINVALUE 1 MAXVALUE 9223372036854775807 CACHE 1;
ALTER SEQUENCE public.setup_cache_id_seq OWNED BY public.setup_cache.id; -- the column's identity

CREATE TABLE public.stream_cursors (
    sink text NOT NULL,
    tx_id xid8 NOT NULL,
    "position" bigint NOT NULL,
    owner text,
    lease_until timestamp with time zone,
    updated_at timestamp with time zone DEFAULT clock_timestamp() NOT NULL,
    CONSTRAINT stream_cursors_owner_check CHECK (((length(owner) >= 1) AND (length(owner) <= 200))),
    CONSTRAINT stream_cursors_pkey PRIMARY KEY (sink),
    CONSTRAINT stream_cursors_sink_check CHECK (((length(sink) >= 1) AND (length(sink) <= 200)))
);
GRANT SELECT, INSERT, UPDATE, DELETE ON TABLE public.stream_cursors TO logbook_app;
GRANT SELECT ON TABLE public.stream_cursors TO logbook_auditor;

CREATE TABLE public.stream_dead_letters (
    id bigint GENERATED ALWAYS AS IDENTITY NOT NULL,
    sink text NOT NULL,
    session_id uuid NOT NULL,
    seq bigint NOT NULL,
    event_type text NOT NULL,
    webhook_type text NOT NULL,
    attempts integer NOT NULL,
    last_error text NOT NULL,
    dead_at timestamp with time zone DEFAULT clock_timestamp() NOT NULL,
    redelivered_at timestamp with time zone,
    CONSTRAINT stream_dead_letters_attempts_check CHECK ((attempts > 0)),
    CONSTRAINT stream_dead_letters_pkey PRIMARY KEY (id),
    CONSTRAINT stream_dead_letters_seq_check CHECK ((seq > 0)),
    CONSTRAINT stream_dead_letters_sink_check CHECK (((length(sink) >= 1) AND (length(sink) <= 200))),
    CONSTRAINT stream_dead_letters_sink_session_id_seq_key UNIQUE (sink, session_id, seq)
);
CREATE INDEX stream_dead_letters_open ON public.stream_dead_letters USING btree (sink, id) WHERE (redelivered_at IS NULL);
GRANT SELECT, INSERT, UPDATE, DELETE ON TABLE public.stream_dead_letters TO logbook_app;
GRANT SELECT ON TABLE public.stream_dead_letters TO logbook_auditor;

CREATE SEQUENCE public.stream_dead_letters_id_seq AS bigint START WITH 1 INCREMENT BY 1 MINVALUE 1 MAXVALUE 9223372036854775807 CACHE 1;
ALTER SEQUENCE public.stream_dead_letters_id_seq OWNED BY public.stream_dead_letters.id; -- the column's identity

CREATE TABLE public.web_sessions (
    id_hash bytea NOT NULL,
    who text NOT NULL,
    token_mac bytea NOT NULL,
    created_at timestamp with time zone DEFAULT clock_timestamp() NOT NULL,
    expires_at timestamp with time zone NOT NULL,
    via text DEFAULT 'bearer_token'::text NOT NULL,
    auditor boolean DEFAULT false NOT NULL,
    CONSTRAINT web_sessions_id_hash_check CHECK ((length(id_hash) = 32)),
    CONSTRAINT web_sessions_pkey PRIMARY KEY (id_hash),
    CONSTRAINT web_sessions_token_mac_check CHECK ((length(token_mac) = 32)),
    CONSTRAINT web_sessions_via_check CHECK ((via = ANY (ARRAY['bearer_token'::text, 'oidc'::text]))),
    CONSTRAINT web_sessions_who_check CHECK ((who <> ''::text))
);
CREATE INDEX web_sessions_expires_at ON public.web_sessions USING btree (expires_at);
GRANT SELECT, INSERT, DELETE ON TABLE public.web_sessions TO logbook_app;

-- functions and procedures

CREATE OR REPLACE FUNCTION public.logbook_acquire_lease(p_session uuid, p_owner text, p_ttl interval)
 RETURNS TABLE(epoch bigint, expires_at timestamp with time zone)
 LANGUAGE sql
AS $function$
    SELECT a.epoch, a.expires_at FROM logbook_acquire_lease(p_session, p_owner, p_ttl, false) a
$function$;

CREATE OR REPLACE FUNCTION public.logbook_acquire_lease(p_session uuid, p_owner text, p_ttl interval, p_claimed boolean)
 RETURNS TABLE(epoch bigint, expires_at timestamp with time zone)
 LANGUAGE plpgsql
AS $function$
DECLARE
    v leases%ROWTYPE;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtextextended(p_session::text, 7461));
    SELECT * INTO v FROM leases l WHERE l.session_id = p_session;
    IF NOT FOUND THEN
        INSERT INTO leases AS l (session_id, owner, epoch, expires_at, claimed)
        VALUES (p_session, p_owner, 1, clock_timestamp() + p_ttl, p_claimed)
        RETURNING l.epoch, l.expires_at INTO epoch, expires_at;
        RETURN NEXT;
        RETURN;
    END IF;
    IF v.owner = p_owner AND v.expires_at > clock_timestamp() THEN
        UPDATE leases l SET expires_at = clock_timestamp() + p_ttl, claimed = p_claimed
         WHERE l.session_id = p_session
        RETURNING l.epoch, l.expires_at INTO epoch, expires_at;
        RETURN NEXT;
        RETURN;
    END IF;
    IF v.expires_at <= clock_timestamp() OR (v.claimed AND logbook_claim_free(v.owner)) THEN
        UPDATE leases l SET owner = p_owner, epoch = v.epoch + 1, expires_at = clock_timestamp() + p_ttl,
                            claimed = p_claimed
         WHERE l.session_id = p_session
        RETURNING l.epoch, l.expires_at INTO epoch, expires_at;
        RETURN NEXT;
    END IF;
END
$function$;

CREATE OR REPLACE FUNCTION public.logbook_append(p_session uuid, p_expected_seq bigint, p_epoch bigint, p_event_ids uuid[], p_types text[], p_actor_kinds text[], p_actor_ids text[], p_payloads jsonb[], p_keys text[], p_sanitized boolean[])
 RETURNS SETOF public.logbook_appended
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_seq      bigint;
    v_hash     bytea;
    v_now      timestamptz;
    v_phash    bytea;
    v_new_hash bytea;
    v_epoch    bigint;
    v_fresh    integer := 0;
    v_row      logbook_appended;
    v_type     text;         -- p_types[i], read once
    v_key      text;         -- p_keys[i], read once
    v_prev     bytea;        -- the hash before the last event written
    v_kept     boolean := true; -- session_work's head is the last event written
    i          integer;
BEGIN
    -- The session's append lock, taken in an expression (a PERFORM is a query of its own).
    IF pg_advisory_xact_lock(hashtextextended(p_session::text, 7461)) IS NULL THEN END IF;

    IF p_epoch IS NOT NULL THEN
        SELECT l.epoch INTO v_epoch FROM leases l WHERE l.session_id = p_session;
        IF v_epoch IS DISTINCT FROM p_epoch THEN
            RAISE EXCEPTION 'logbook: append to session % with stale lease epoch % (current %)',
                p_session, p_epoch, coalesce(v_epoch::text, 'none') USING ERRCODE = 'LB002';
        END IF;
    END IF;

    SELECT e.seq, e.hash INTO v_seq, v_hash
      FROM events e WHERE e.session_id = p_session ORDER BY e.seq DESC LIMIT 1;
    IF NOT FOUND THEN
        -- The session's first event: the one check the foreign key made, made once.
        PERFORM 1 FROM sessions s WHERE s.id = p_session;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'logbook: session % does not exist', p_session USING ERRCODE = 'LB003';
        END IF;
        v_seq := 0;
        v_hash := '\x0000000000000000000000000000000000000000000000000000000000000000'::bytea;
    END IF;

    -- An expectation is checked only when something new would be written: a retried
    -- append whose every event is a duplicate returns the stored events.
    IF p_expected_seq IS NOT NULL THEN
        FOR i IN 1 .. coalesce(array_length(p_types, 1), 0) LOOP
            IF p_keys[i] IS NULL OR NOT EXISTS (
                SELECT 1 FROM events e WHERE e.session_id = p_session AND e.idempotency_key = p_keys[i]) THEN
                v_fresh := v_fresh + 1;
            END IF;
        END LOOP;
        IF v_fresh > 0 AND v_seq <> p_expected_seq THEN
            RAISE EXCEPTION 'logbook: append to session % expected seq %, head is %',
                p_session, p_expected_seq, v_seq
                USING ERRCODE = 'LB001', DETAIL = v_seq::text;
        END IF;
    END IF;

    FOR i IN 1 .. coalesce(array_length(p_types, 1), 0) LOOP
        v_type := p_types[i];
        v_key  := p_keys[i];
        IF v_key IS NOT NULL THEN
            RETURN QUERY
                SELECT e.seq, e.event_id, e.created_at, e.payload_hash, e.prev_hash, e.hash,
                       e.position, true, e.type, e.actor_kind, e.actor_id, e.payload, e.sanitized
                  FROM events e
                 WHERE e.session_id = p_session AND e.idempotency_key = v_key;
            IF FOUND THEN
                CONTINUE;
            END IF;
        END IF;

        v_seq   := v_seq + 1;
        v_now   := clock_timestamp();
        v_phash := sha256(convert_to(p_payloads[i]::text, 'UTF8'));
        -- The header of logbook_event_header, written out: a SQL function call costs more
        -- than the rest of the hash. One format() instead of concat_ws over casts and ||
        -- (the same text: %s prints a value by its type's output function, as ::text does;
        -- concat_ws would skip a NULL where format prints nothing, but every field but the
        -- key is a NOT NULL column, so a row with a NULL there is never written).
        v_new_hash := sha256(v_hash
            || convert_to(format('logbook-event-v1|%s|%s|%s|%s:%s|%s:%s|%s:%s|%s|%s',
                   p_session, v_seq, p_event_ids[i],
                   octet_length(v_type), v_type,
                   octet_length(p_actor_kinds[i]), p_actor_kinds[i],
                   octet_length(p_actor_ids[i]), p_actor_ids[i],
                   (extract(epoch FROM v_now) * 1000000)::bigint,
                   CASE WHEN v_key IS NULL THEN '-' ELSE octet_length(v_key) || ':' || v_key END
               ), 'UTF8')
            || v_phash);

        INSERT INTO events AS e (session_id, seq, event_id, type, actor_kind, actor_id, created_at,
                                 payload, payload_hash, idempotency_key, prev_hash, hash, sanitized)
        VALUES (p_session, v_seq, p_event_ids[i], v_type, p_actor_kinds[i], p_actor_ids[i], v_now,
                p_payloads[i], v_phash, v_key, v_hash, v_new_hash, p_sanitized[i])
        RETURNING e.seq, e.event_id, e.created_at, e.payload_hash, e.prev_hash, e.hash, e.position,
                  false, NULL::text, NULL::text, NULL::text, NULL::jsonb, e.sanitized
        INTO v_row;
        RETURN NEXT v_row;
        v_prev := v_hash;
        v_hash := v_new_hash;
        v_kept := false;

        -- session_work, under the append lock: no other transaction writes the session's row.
        IF v_type IN ('user_message', 'followup_signal') THEN
            -- An in-place update while the message's hour and the pending flag stay (00011);
            -- created_at may go back with the clock, hence greatest.
            -- pending and last_message_hour as 00011 defined them (they are kept here now).
            -- The head moves in the same UPDATE.
            UPDATE session_work AS w
               SET last_message_seq = v_seq, last_message_at = greatest(w.last_message_at, v_now),
                   pending = v_seq > w.answered_through,
                   last_message_hour = date_trunc('hour', greatest(w.last_message_at, v_now) AT TIME ZONE 'UTC'),
                   head_seq = v_seq, head_at = v_now, head_prev = v_prev, head_hash = v_hash
             WHERE w.session_id = p_session;
            IF NOT FOUND THEN -- answered_through is 0 and v_seq at least 1: pending
                INSERT INTO session_work (session_id, last_message_seq, last_message_at, pending, last_message_hour,
                                          head_seq, head_at, head_prev, head_hash)
                VALUES (p_session, v_seq, v_now, true, date_trunc('hour', v_now AT TIME ZONE 'UTC'),
                        v_seq, v_now, v_prev, v_hash);
            END IF;
            v_kept := true;
        ELSIF v_type IN ('turn_completed', 'turn_suspended', 'approval_decided', 'stop_requested') THEN
            PERFORM logbook_track_turn(p_session, v_seq, v_type, p_payloads[i]);
        END IF;
    END LOOP;

    -- session_work's head follows the last event written (the one-event statement reads it).
    IF NOT v_kept THEN
        UPDATE session_work AS w
           SET head_seq = v_seq, head_at = v_now, head_prev = v_prev, head_hash = v_hash
         WHERE w.session_id = p_session;
        IF NOT FOUND THEN -- a session whose row Store.Open did not make: no message yet
            INSERT INTO session_work (session_id, pending, head_seq, head_at, head_prev, head_hash)
            VALUES (p_session, false, v_seq, v_now, v_prev, v_hash);
        END IF;
    END IF;
END
$function$;

CREATE OR REPLACE FUNCTION public.logbook_audit_reject_change()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
BEGIN
    RAISE EXCEPTION 'logbook: % on % is not allowed: audit records are append-only', TG_OP, TG_TABLE_NAME
        USING ERRCODE = 'insufficient_privilege';
END
$function$;

CREATE OR REPLACE FUNCTION public.logbook_claim_free(p_owner text)
 RETURNS boolean
 LANGUAGE sql
AS $function$
    SELECT CASE
        WHEN EXISTS (SELECT 1 FROM replica_peers p
                     WHERE p.owner = p_owner AND p.alive_until > clock_timestamp()) THEN false
        ELSE pg_try_advisory_xact_lock_shared(hashtextextended(p_owner, 7461005))
    END
$function$;

CREATE OR REPLACE FUNCTION public.logbook_event_header(p_session uuid, p_seq bigint, p_event uuid, p_type text, p_actor_kind text, p_actor_id text, p_created timestamp with time zone, p_key text)
 RETURNS bytea
 LANGUAGE sql
 IMMUTABLE
AS $function$
    SELECT convert_to(concat_ws('|',
        'logbook-event-v1',
        p_session::text,
        p_seq::text,
        p_event::text,
        octet_length(p_type)::text || ':' || p_type,
        octet_length(p_actor_kind)::text || ':' || p_actor_kind,
        octet_length(p_actor_id)::text || ':' || p_actor_id,
        ((extract(epoch FROM p_created) * 1000000)::bigint)::text,
        CASE WHEN p_key IS NULL THEN '-' ELSE octet_length(p_key)::text || ':' || p_key END
    ), 'UTF8')
$function$;

CREATE OR REPLACE FUNCTION public.logbook_keep_lease_epoch()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
BEGIN
    INSERT INTO session_work AS w (session_id, pending, lease_epoch)
    VALUES (NEW.session_id, false, NEW.epoch)
    ON CONFLICT (session_id) DO UPDATE SET lease_epoch = EXCLUDED.lease_epoch;
    RETURN NULL;
END
$function$;

CREATE OR REPLACE FUNCTION public.logbook_ledger(p_team text, p_channel text)
 RETURNS uuid
 LANGUAGE plpgsql
AS $function$
DECLARE
    v uuid;
BEGIN
    SELECT s.id INTO v FROM sessions s WHERE s.channel_id = p_channel AND s.thread_ts = 'ledger' AND s.by_thread;
    IF FOUND THEN
        RETURN v;
    END IF;
    INSERT INTO sessions AS s (id, team_id, channel_id, thread_ts)
    VALUES (gen_random_uuid(),
            coalesce(nullif(p_team, ''),
                     (SELECT o.team_id FROM sessions o WHERE o.channel_id = p_channel ORDER BY o.created_at LIMIT 1),
                     '-'),
            p_channel, 'ledger')
    ON CONFLICT DO NOTHING
    RETURNING s.id INTO v;
    IF v IS NULL THEN -- another transaction opened it meanwhile
        SELECT s.id INTO v FROM sessions s WHERE s.channel_id = p_channel AND s.thread_ts = 'ledger' AND s.by_thread;
    END IF;
    RETURN v;
END
$function$;

CREATE OR REPLACE FUNCTION public.logbook_memory_reject_change()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
BEGIN
    IF TG_OP = 'UPDATE' AND current_user = 'logbook_retention' AND current_setting('logbook.purge', true) = 'on' THEN
        RETURN NEW;
    END IF;
    RAISE EXCEPTION 'logbook: % on % is not allowed: channel memory is append-only', TG_OP, TG_TABLE_NAME
        USING ERRCODE = 'insufficient_privilege',
              HINT = 'forget a note with /logbook forget <id>; only retention empties its text';
END
$function$;

CREATE OR REPLACE FUNCTION public.logbook_payload_int(p jsonb, field text)
 RETURNS bigint
 LANGUAGE sql
 IMMUTABLE
AS $function$
    SELECT CASE WHEN p->>field ~ '^\s*[-+]?[0-9]{1,18}\s*$' THEN (p->>field)::bigint ELSE 0 END
$function$;

CREATE OR REPLACE FUNCTION public.logbook_payload_time(p jsonb, field text)
 RETURNS timestamp with time zone
 LANGUAGE plpgsql
 STABLE
AS $function$
BEGIN
    RETURN (p->>field)::timestamptz;
EXCEPTION WHEN others THEN
    RETURN NULL;
END
$function$;

CREATE OR REPLACE FUNCTION public.logbook_purge_expired(p_cutoff timestamp with time zone, p_reason text, p_who text)
 RETURNS TABLE(purge_id bigint, purged_session uuid, from_seq bigint, to_seq bigint, purged bigint, head_seq bigint, head_hash bytea, last_event_at timestamp with time zone)
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'public'
AS $function$
#variable_conflict use_column
DECLARE
    v_sid   uuid;
    v_last  timestamptz;
    v_hseq  bigint;
    v_hhash bytea;
    v_n     bigint;
    v_from  bigint;
    v_to    bigint;
    v_fork  uuid;
BEGIN
    IF coalesce(p_reason, '') = '' OR coalesce(p_who, '') = '' THEN
        RAISE EXCEPTION 'logbook: a purge needs a reason and who runs it' USING ERRCODE = '22023';
    END IF;
    IF p_cutoff IS NULL OR p_cutoff > clock_timestamp() THEN
        RAISE EXCEPTION 'logbook: purge cutoff % is in the future', p_cutoff USING ERRCODE = '22023';
    END IF;
    PERFORM pg_advisory_xact_lock(7461002);
    -- The search indexer's lock: no batch writes the projection between here and commit.
    PERFORM pg_advisory_xact_lock(7461004);
    FOR v_sid IN
        WITH RECURSIVE held(id) AS (
            SELECT hs.id FROM sessions hs
             WHERE EXISTS (
               SELECT 1 FROM audit_holds h
                WHERE h.action = 'add'
                  AND NOT EXISTS (SELECT 1 FROM audit_holds r WHERE r.hold_id = h.hold_id AND r.action = 'remove')
                  AND ((h.scope = 'session' AND h.value = hs.id::text)
                    OR (h.scope = 'channel' AND h.value = hs.channel_id)
                    OR (h.scope = 'actor' AND EXISTS (
                            SELECT 1 FROM events e WHERE e.session_id = hs.id AND e.actor_id = h.value))))
          UNION
            -- A held fork holds the parent it continues (and that parent's own parent); a held
            -- eval record the session it ran again.
            SELECT CASE f.type WHEN 'session_forked' THEN (f.payload->>'parent')::uuid
                               ELSE (f.payload->>'original')::uuid END
              FROM events f JOIN held ON f.session_id = held.id
             WHERE f.type IN ('session_forked', 'replay_started') AND f.seq = 1 AND f.payload IS NOT NULL
        )
        SELECT s.id FROM sessions s
         WHERE s.thread_ts <> 'ledger' -- a channel's ledger is its current configuration (00210)
           AND EXISTS (SELECT 1 FROM events e WHERE e.session_id = s.id AND e.payload IS NOT NULL
                                               AND e.type NOT IN ('session_forked', 'replay_started'))
           AND NOT EXISTS (SELECT 1 FROM events e WHERE e.session_id = s.id AND e.created_at >= p_cutoff)
           AND s.id NOT IN (SELECT held.id FROM held)
         ORDER BY s.created_at, s.id
    LOOP
        PERFORM pg_advisory_xact_lock(hashtextextended(v_sid::text, 7461));
        SELECT e.seq, e.hash, e.created_at INTO v_hseq, v_hhash, v_last
          FROM events e WHERE e.session_id = v_sid ORDER BY e.seq DESC LIMIT 1;
        IF v_last >= p_cutoff THEN
            CONTINUE; -- an append landed after the scan
        END IF;
        PERFORM set_config('logbook.purge', 'on', true);
        WITH u AS (
            UPDATE events e SET payload = NULL
             WHERE e.session_id = v_sid AND e.payload IS NOT NULL
               -- a fork's or an eval record's link: ids and a hash, no one's words
               AND e.type NOT IN ('session_forked', 'replay_started')
            RETURNING e.seq
        )
        SELECT count(*), min(u.seq), max(u.seq) INTO v_n, v_from, v_to FROM u;
        PERFORM set_config('logbook.purge', 'off', true);
        IF v_n = 0 THEN
            CONTINUE;
        END IF;
        -- Every payload of the session is gone now: so is everything derived from them.
        DELETE FROM search_docs d WHERE d.session_id = v_sid;
        -- The session's files: content no other session references goes with it (a bucket's
        -- copy is marked, and deleted by the retention run that called this).
        UPDATE file_blobs b SET purged_at = clock_timestamp()
         WHERE b.purged_at IS NULL
           AND b.sha256 IN (SELECT r.sha256 FROM file_refs r WHERE r.session_id = v_sid)
           AND NOT EXISTS (SELECT 1 FROM file_refs o WHERE o.sha256 = b.sha256 AND o.session_id <> v_sid);
        DELETE FROM file_refs r WHERE r.session_id = v_sid;
        DELETE FROM file_blobs b
         WHERE NOT b.in_bucket AND b.purged_at IS NOT NULL
           AND NOT EXISTS (SELECT 1 FROM file_refs o WHERE o.sha256 = b.sha256);
        -- A session that shared the same content while this ran (its reference committed
        -- after the mark above) keeps it readable.
        UPDATE file_blobs b SET purged_at = NULL
         WHERE b.purged_at IS NOT NULL AND EXISTS (SELECT 1 FROM file_refs o WHERE o.sha256 = b.sha256);
        UPDATE search_sessions s SET title = '', first_text = '' WHERE s.session_id = v_sid;
        INSERT INTO audit_purges AS p (session_id, from_seq, to_seq, purged, head_seq, head_hash,
                                       last_event_at, cutoff, reason, who)
        VALUES (v_sid, v_from, v_to, v_n, v_hseq, v_hhash, v_last, p_cutoff, p_reason, p_who)
        RETURNING p.id INTO purge_id;
        purged_session := v_sid; from_seq := v_from; to_seq := v_to; purged := v_n;
        head_seq := v_hseq; head_hash := v_hhash; last_event_at := v_last;
        RETURN NEXT;
        -- An eval record of this session (a what-if, `logbook replay --from`) holds its words:
        -- the recorded side of each call and reply. It goes whole with them, but for its link
        -- (replay_started: ids and a hash), which stays checkable.
        FOR v_fork IN
            SELECT r.session_id FROM events r
             WHERE r.type = 'replay_started' AND r.seq = 1 AND r.payload->>'original' = v_sid::text
             ORDER BY r.session_id
        LOOP
            PERFORM pg_advisory_xact_lock(hashtextextended(v_fork::text, 7461));
            PERFORM set_config('logbook.purge', 'on', true);
            WITH u AS (
                UPDATE events e SET payload = NULL
                 WHERE e.session_id = v_fork AND e.payload IS NOT NULL AND e.type <> 'replay_started'
                RETURNING e.seq
            )
            SELECT count(*), min(u.seq), max(u.seq) INTO v_n, v_from, v_to FROM u;
            PERFORM set_config('logbook.purge', 'off', true);
            IF v_n = 0 THEN
                CONTINUE;
            END IF;
            DELETE FROM search_docs d WHERE d.session_id = v_fork;
            -- Its files (the work a what-if's sandbox saved) go as the original's do.
            UPDATE file_blobs b SET purged_at = clock_timestamp()
             WHERE b.purged_at IS NULL
               AND b.sha256 IN (SELECT r.sha256 FROM file_refs r WHERE r.session_id = v_fork)
               AND NOT EXISTS (SELECT 1 FROM file_refs o WHERE o.sha256 = b.sha256 AND o.session_id <> v_fork);
            DELETE FROM file_refs r WHERE r.session_id = v_fork;
            DELETE FROM file_blobs b
             WHERE NOT b.in_bucket AND b.purged_at IS NOT NULL
               AND NOT EXISTS (SELECT 1 FROM file_refs o WHERE o.sha256 = b.sha256);
            SELECT e.seq, e.hash, e.created_at INTO v_hseq, v_hhash, v_last
              FROM events e WHERE e.session_id = v_fork ORDER BY e.seq DESC LIMIT 1;
            INSERT INTO audit_purges AS p (session_id, from_seq, to_seq, purged, head_seq, head_hash,
                                           last_event_at, cutoff, reason, who)
            VALUES (v_fork, v_from, v_to, v_n, v_hseq, v_hhash, v_last, p_cutoff,
                    p_reason || ': an eval record of purged session ' || v_sid::text, p_who)
            RETURNING p.id INTO purge_id;
            purged_session := v_fork; from_seq := v_from; to_seq := v_to; purged := v_n;
            head_seq := v_hseq; head_hash := v_hhash; last_event_at := v_last;
            RETURN NEXT;
        END LOOP;
        -- A fork's summary of its history took this session's words in with it (the
        -- conversation a fork continues is its parent's through the fork's seq): the summaries
        -- go with those words, in every fork below this session at any depth. What the forks
        -- said themselves stays theirs. Recorded as a purge of each fork it touched.
        FOR v_fork IN
            WITH RECURSIVE forks(id) AS (
                SELECT f.session_id FROM events f
                 WHERE f.type = 'session_forked' AND f.seq = 1 AND f.payload->>'parent' = v_sid::text
              UNION
                SELECT f.session_id FROM events f JOIN forks ON f.payload->>'parent' = forks.id::text
                 WHERE f.type = 'session_forked' AND f.seq = 1
            )
            SELECT forks.id FROM forks ORDER BY forks.id
        LOOP
            PERFORM pg_advisory_xact_lock(hashtextextended(v_fork::text, 7461));
            PERFORM set_config('logbook.purge', 'on', true);
            WITH u AS (
                UPDATE events e SET payload = NULL
                 WHERE e.session_id = v_fork AND e.type = 'context_summary' AND e.payload IS NOT NULL
                RETURNING e.seq
            )
            SELECT count(*), min(u.seq), max(u.seq) INTO v_n, v_from, v_to FROM u;
            PERFORM set_config('logbook.purge', 'off', true);
            IF v_n = 0 THEN
                CONTINUE;
            END IF;
            SELECT e.seq, e.hash, e.created_at INTO v_hseq, v_hhash, v_last
              FROM events e WHERE e.session_id = v_fork ORDER BY e.seq DESC LIMIT 1;
            INSERT INTO audit_purges AS p (session_id, from_seq, to_seq, purged, head_seq, head_hash,
                                           last_event_at, cutoff, reason, who)
            VALUES (v_fork, v_from, v_to, v_n, v_hseq, v_hhash, v_last, p_cutoff,
                    p_reason || ': the history summaries of a fork of purged session ' || v_sid::text, p_who)
            RETURNING p.id INTO purge_id;
            purged_session := v_fork; from_seq := v_from; to_seq := v_to; purged := v_n;
            head_seq := v_hseq; head_hash := v_hhash; last_event_at := v_last;
            RETURN NEXT;
        END LOOP;
    END LOOP;
END
$function$;
ALTER ROUTINE public.logbook_purge_expired(p_cutoff timestamp with time zone, p_reason text, p_who text) OWNER TO logbook_retention;
REVOKE ALL ON ROUTINE public.logbook_purge_expired(p_cutoff timestamp with time zone, p_reason text, p_who text) FROM PUBLIC;

CREATE OR REPLACE FUNCTION public.logbook_purge_memory(p_cutoff timestamp with time zone)
 RETURNS bigint
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'public'
AS $function$
DECLARE
    v_n bigint;
BEGIN
    IF p_cutoff IS NULL OR p_cutoff > clock_timestamp() THEN
        RAISE EXCEPTION 'logbook: purge cutoff % is in the future', p_cutoff USING ERRCODE = '22023';
    END IF;
    PERFORM pg_advisory_xact_lock(7461002);
    PERFORM set_config('logbook.purge', 'on', true);
    WITH m AS (
        UPDATE channel_memory m SET text = NULL, purged_at = clock_timestamp()
         WHERE m.text IS NOT NULL AND m.created_at < p_cutoff
           AND NOT EXISTS (
               SELECT 1 FROM audit_holds h
                WHERE h.action = 'add'
                  AND NOT EXISTS (SELECT 1 FROM audit_holds r WHERE r.hold_id = h.hold_id AND r.action = 'remove')
                  AND ((h.scope = 'channel' AND h.value = m.channel)
                    OR (h.scope = 'actor' AND h.value = m.by_id)
                    OR (h.scope = 'session' AND h.value = m.session_id::text)))
        RETURNING m.id, m.channel
    ), e AS (
        -- The note's ledger event loses its payload with the text (its hash and key stay).
        UPDATE events e SET payload = NULL
          FROM m, sessions s
         WHERE s.channel_id = m.channel AND s.thread_ts = 'ledger' AND s.by_thread
           AND e.session_id = s.id AND e.idempotency_key = 'note/' || m.id AND e.payload IS NOT NULL
        RETURNING 1
    )
    SELECT count(*) INTO v_n FROM m;
    PERFORM set_config('logbook.purge', 'off', true);
    RETURN v_n;
END
$function$;
ALTER ROUTINE public.logbook_purge_memory(p_cutoff timestamp with time zone) OWNER TO logbook_retention;
REVOKE ALL ON ROUTINE public.logbook_purge_memory(p_cutoff timestamp with time zone) FROM PUBLIC;

CREATE OR REPLACE FUNCTION public.logbook_reject_change()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
BEGIN
    IF current_user = 'logbook_retention' AND current_setting('logbook.purge', true) = 'on' THEN
        IF TG_OP = 'UPDATE' THEN RETURN NEW; END IF;
        IF TG_OP = 'DELETE' THEN RETURN OLD; END IF;
        RETURN NULL;
    END IF;
    RAISE EXCEPTION 'logbook: % on % is not allowed: the session log is append-only', TG_OP, TG_TABLE_NAME
        USING ERRCODE = 'insufficient_privilege',
              HINT = 'append a new event instead (e.g. user_message_edited); only the retention path may purge';
END
$function$;

CREATE OR REPLACE FUNCTION public.logbook_release_lease(p_session uuid, p_owner text, p_epoch bigint)
 RETURNS boolean
 LANGUAGE plpgsql
AS $function$
BEGIN
    PERFORM pg_advisory_xact_lock(hashtextextended(p_session::text, 7461));
    UPDATE leases l SET expires_at = clock_timestamp() - interval '1 microsecond'
     WHERE l.session_id = p_session AND l.owner = p_owner AND l.epoch = p_epoch;
    RETURN FOUND;
END
$function$;

CREATE OR REPLACE FUNCTION public.logbook_renew_lease(p_session uuid, p_owner text, p_epoch bigint, p_ttl interval)
 RETURNS TABLE(expires_at timestamp with time zone)
 LANGUAGE plpgsql
AS $function$
BEGIN
    PERFORM pg_advisory_xact_lock(hashtextextended(p_session::text, 7461));
    RETURN QUERY
        UPDATE leases l SET expires_at = clock_timestamp() + p_ttl
         WHERE l.session_id = p_session AND l.owner = p_owner AND l.epoch = p_epoch
           AND l.expires_at > clock_timestamp()
        RETURNING l.expires_at;
END
$function$;

CREATE OR REPLACE FUNCTION public.logbook_track_turn(p_session uuid, p_seq bigint, p_type text, p_payload jsonb)
 RETURNS void
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_through bigint;
BEGIN
    IF p_type = 'turn_completed' THEN -- the latest one by seq counts
        -- A new row has no message yet (last_message_seq 0, last_message_at NULL); pending
        -- follows answered_through (00011's definitions).
        v_through := logbook_turn_through(p_payload);
        INSERT INTO session_work AS w (session_id, answered_seq, answered_through, pending, last_message_hour)
        VALUES (p_session, p_seq, v_through, 0 > v_through, NULL)
        ON CONFLICT (session_id) DO UPDATE
           SET answered_seq = EXCLUDED.answered_seq, answered_through = EXCLUDED.answered_through,
               awaiting_until = NULL, pending = w.last_message_seq > EXCLUDED.answered_through
         WHERE w.answered_seq < EXCLUDED.answered_seq;
    ELSIF p_type = 'turn_suspended' THEN
        -- What the cell did not see before it went away still wakes the session: messages
        -- after the last one it read ("seen"), and a decision or stop appended meanwhile
        -- (they cleared a deadline that was not set yet).
        UPDATE session_work
           SET awaiting_until = CASE WHEN EXISTS (
                   SELECT 1 FROM events e
                    WHERE e.session_id = p_session AND e.seq > logbook_payload_int(p_payload, 'turn')
                      AND ((e.type = 'approval_decided' AND e.payload->>'call_id' = p_payload->>'call_id')
                        OR e.type = 'stop_requested'))
               THEN NULL ELSE logbook_payload_time(p_payload, 'until') END,
               awaiting_through = least(last_message_seq, logbook_payload_int(p_payload, 'seen'))
         WHERE session_id = p_session;
    ELSIF p_type IN ('approval_decided', 'stop_requested') THEN -- the waiting turn can move on
        UPDATE session_work SET awaiting_until = NULL
         WHERE session_id = p_session AND awaiting_until IS NOT NULL;
    END IF;
END
$function$;

CREATE OR REPLACE FUNCTION public.logbook_turn_through(p jsonb)
 RETURNS bigint
 LANGUAGE sql
 IMMUTABLE
AS $function$
    SELECT CASE WHEN p->>'through' ~ '^\s*[-+]?[0-9]{1,18}\s*$' THEN (p->>'through')::bigint ELSE 0 END
$function$;

CREATE OR REPLACE FUNCTION public.logbook_wait_claim(p_key bigint, p_ms integer)
 RETURNS boolean
 LANGUAGE plpgsql
AS $function$
BEGIN
    PERFORM set_config('lock_timeout', greatest(p_ms, 1)::text, true);
    PERFORM pg_advisory_xact_lock_shared(p_key);
    RETURN true;
EXCEPTION WHEN lock_not_available THEN
    RETURN false;
END
$function$;

-- comments

-- (none)
