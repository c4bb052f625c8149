-- Where a charge's tokens came from (issue 48): a model call that fails after the provider
-- accepted it (a stream broken part way, a person's stop, a timeout) is charged what was sent
-- and what streamed, which the provider may never have counted. source says which:
--   'provider'  the provider's usage (the whole answer's, or what its stream reported);
--   'estimate'  logbook estimated some of it (bot/brain: the input from the request sent,
--               the output from the text and tool input that streamed; see docs/budgets.md);
--   'none'      nothing to charge: the call failed before the provider accepted it
--               (connection refused, an HTTP error before any stream), charged 0;
--   ''          a hold or a refusal (their amounts are the admission's estimate), or a charge
--               written before this column.

-- +goose Up
ALTER TABLE model_spend ADD COLUMN source text NOT NULL DEFAULT ''
    CHECK (source IN ('', 'provider', 'estimate', 'none'));

-- +goose Down
ALTER TABLE model_spend DROP COLUMN source;
