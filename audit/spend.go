package audit

// The model spend (model_spend, migrations 00030 and 00200) and the budget raises
// (budget_raises) of an export's window, in spend.* and budget_raises.*: every hold, charge and
// refusal with its channel, person, session, model, tokens and cost in millionths of the
// prices' currency and a charge's source (provider; estimate: a call that failed part way,
// charged what was sent and streamed; none: a call that never reached the model, charged 0),
// and every raise with who made it — the figures `logbook usage` sums up. An export for one
// channel has that channel's rows only.
var (
	spendRecordColumns = []recordColumn{{"id", 'n'}, {"at", 's'}, {"call_id", 's'}, {"kind", 's'}, {"day", 's'},
		{"channel", 's'}, {"person", 's'}, {"session_id", 's'}, {"turn", 'n'}, {"purpose", 's'}, {"provider", 's'},
		{"model", 's'}, {"input_tokens", 'n'}, {"output_tokens", 'n'}, {"cache_read_tokens", 'n'},
		{"cache_write_tokens", 'n'}, {"cost_micros", 'n'}, {"reason", 's'}, {"source", 's'}}
	raiseRecordColumns = []recordColumn{{"id", 'n'}, {"at", 's'}, {"day", 's'}, {"scope", 's'}, {"subject", 's'},
		{"channel", 's'}, {"amount_micros", 'n'}, {"raised_by", 's'}}
)

const sqlSpendInWindow = `
SELECT id, to_char(at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'), call_id, kind, to_char(day, 'YYYY-MM-DD'),
       channel, person, session_id, turn, purpose, provider, model, input_tokens, output_tokens,
       cache_read_tokens, cache_write_tokens, cost_micros, reason, source
FROM model_spend WHERE at >= $1 AND at < $2 AND ($3::text = '' OR channel = $3) ORDER BY id`

const sqlRaisesInWindow = `
SELECT id, to_char(at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'), to_char(day, 'YYYY-MM-DD'), scope, subject,
       channel, amount, raised_by
FROM budget_raises WHERE at >= $1 AND at < $2 AND ($3::text = '' OR channel = $3) ORDER BY id`
