-- What the model calls cost, per channel, person and UTC day (bot/budget): the record a
-- budget is checked against and `logbook usage`, its web page and audit exports sum up. Rows
-- are only appended (a statement trigger refuses UPDATE, DELETE and TRUNCATE). One call is
-- up to two rows sharing a call_id:
--   kind 'hold'    written before the call starts, in the transaction that admitted it under
--                  the channel's and the person's budget: cost_micros is the most it may cost
--                  (estimated input at the input price, max_output_tokens at the output price);
--   kind 'charge'  written when it answered: the provider's usage and its price; a failed call
--                  is charged 0. A hold with no charge (a process that died mid-call) counts
--                  at its estimate: spend is never understated.
--   kind 'refused' a call the budget did not let start (reason says which budget), cost 0.
-- Amounts are millionths of the prices' currency (LOGBOOK_PRICES; the built-in table is USD).
--
-- budget_raises: an admin's raise of a budget for one UTC day (`/logbook budget raise`):
-- scope 'channel' or 'person' (subject is the channel or the person's user id), amount in
-- millionths, who, when. Append-only too.

-- +goose Up
CREATE TABLE model_spend (
    id                 bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    call_id            uuid        NOT NULL,
    kind               text        NOT NULL CHECK (kind IN ('hold', 'charge', 'refused')),
    day                date        NOT NULL,
    channel            text        NOT NULL CHECK (channel <> ''),
    person             text        NOT NULL,
    session_id         uuid,
    turn               bigint      NOT NULL DEFAULT 0,
    purpose            text        NOT NULL DEFAULT '',
    provider           text        NOT NULL DEFAULT '',
    model              text        NOT NULL DEFAULT '',
    input_tokens       bigint      NOT NULL DEFAULT 0 CHECK (input_tokens >= 0),
    output_tokens      bigint      NOT NULL DEFAULT 0 CHECK (output_tokens >= 0),
    cache_read_tokens  bigint      NOT NULL DEFAULT 0 CHECK (cache_read_tokens >= 0),
    cache_write_tokens bigint      NOT NULL DEFAULT 0 CHECK (cache_write_tokens >= 0),
    cost_micros        bigint      NOT NULL CHECK (cost_micros >= 0),
    reason             text        NOT NULL DEFAULT '' CHECK (length(reason) <= 500),
    at                 timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE UNIQUE INDEX model_spend_call ON model_spend (call_id, kind);
CREATE INDEX model_spend_channel_day ON model_spend (channel, day);
CREATE INDEX model_spend_person_day ON model_spend (person, day);
CREATE INDEX model_spend_day ON model_spend (day);
CREATE TRIGGER model_spend_append_only BEFORE UPDATE OR DELETE OR TRUNCATE ON model_spend
    FOR EACH STATEMENT EXECUTE FUNCTION logbook_audit_reject_change();

CREATE TABLE budget_raises (
    id        bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    day       date        NOT NULL,
    scope     text        NOT NULL CHECK (scope IN ('channel', 'person')),
    subject   text        NOT NULL CHECK (subject <> ''),
    channel   text        NOT NULL CHECK (channel <> ''),
    amount    bigint      NOT NULL CHECK (amount > 0),
    raised_by text        NOT NULL CHECK (raised_by <> ''),
    at        timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX budget_raises_subject ON budget_raises (scope, subject, day);
CREATE TRIGGER budget_raises_append_only BEFORE UPDATE OR DELETE OR TRUNCATE ON budget_raises
    FOR EACH STATEMENT EXECUTE FUNCTION logbook_audit_reject_change();

REVOKE ALL ON model_spend, budget_raises FROM PUBLIC;
GRANT SELECT, INSERT ON model_spend, budget_raises TO logbook_app;
GRANT SELECT ON model_spend, budget_raises TO logbook_auditor;

-- +goose Down
DROP TABLE budget_raises;
DROP TABLE model_spend;
