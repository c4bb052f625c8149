package session

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Spend is one model call's row in model_spend (see migration 00030): a hold written when
// the call was admitted, its charge when it answered, or a refusal. Amounts are millionths
// of the prices' currency (micros).
type Spend struct {
	CallID           uuid.UUID
	Kind             string // SpendHold, SpendCharge, SpendRefused
	Day              time.Time
	Channel, Person  string // Person "" when no person asked (a schedule, a hook)
	SessionID        ID
	Turn             int64
	Purpose          string
	Provider, Model  string
	InputTokens      int64
	OutputTokens     int64
	CacheReadTokens  int64
	CacheWriteTokens int64
	CostMicros       int64
	Reason           string
	// Source is where a charge's tokens came from: UsageFromProvider, UsageEstimated (a call
	// that failed part way, whose tokens logbook estimated in part) or UsageNone (a call that
	// never reached the model, charged 0); "" for holds and refusals.
	Source string
	At     time.Time
}

// Kinds of Spend rows.
const (
	SpendHold    = "hold"
	SpendCharge  = "charge"
	SpendRefused = "refused"
)

// SpendLimits are the budgets a hold must fit in, in micros; a negative limit is none.
type SpendLimits struct {
	Channel, Person int64
}

// SpendTotals are a channel's and a person's spend of one day, in micros, holds without a
// charge counted at their estimate.
type SpendTotals struct {
	Channel, Person int64
}

// UTCDay is t's UTC calendar day, the unit budgets are kept in.
func UTCDay(t time.Time) time.Time {
	y, m, d := t.UTC().Date()
	return time.Date(y, m, d, 0, 0, 0, 0, time.UTC)
}

// effective is the spend of a row set: charges, and holds that have no charge (yet).
const sqlSpentChannel = `SELECT coalesce(sum(cost_micros), 0)::bigint FROM model_spend s
WHERE channel = $1 AND day = $2 AND (kind = 'charge' OR (kind = 'hold' AND NOT EXISTS (
  SELECT 1 FROM model_spend c WHERE c.call_id = s.call_id AND c.kind = 'charge')))`

const sqlSpentPerson = `SELECT coalesce(sum(cost_micros), 0)::bigint FROM model_spend s
WHERE person = $1 AND day = $2 AND (kind = 'charge' OR (kind = 'hold' AND NOT EXISTS (
  SELECT 1 FROM model_spend c WHERE c.call_id = s.call_id AND c.kind = 'charge')))`

const sqlInsertSpend = `INSERT INTO model_spend (call_id, kind, day, channel, person, session_id, turn, purpose,
  provider, model, input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, cost_micros, reason, source)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17)
ON CONFLICT (call_id, kind) DO NOTHING`

// spendLock is the advisory lock key of one budget's day: admissions under it are serialised
// across replicas, so two calls can never both take the last of a budget.
func spendLock(scope, subject string, day time.Time) int64 {
	h := fnv.New64a()
	fmt.Fprintf(h, "logbook/budget/%s/%s/%s", scope, subject, day.Format(time.DateOnly))
	return int64(h.Sum64())
}

// AdmitSpend writes hold (kind SpendHold, its CostMicros the most the call may cost) when it
// fits in what is left of lim on hold's day — the channel's and the person's budget, each
// checked under a lock of its own — and otherwise writes it as SpendRefused with reason
// "channel" or "person". It returns the totals before the hold and whether it was admitted.
//
// Only a budget that has a limit is locked and summed (a total without one is returned as
// 0): with no limit at all the hold is simply written. Every admission of one person's (or
// channel's) calls waits on that budget's lock while the day's rows are summed, so an
// unlimited budget locked anyway serialised a busy person's calls across every replica
// (issue 33: most of the database's time per message at ten replicas was this wait).
func (s *Store) AdmitSpend(ctx context.Context, hold Spend, lim SpendLimits) (SpendTotals, bool, error) {
	if hold.Channel == "" || hold.CallID == uuid.Nil {
		return SpendTotals{}, false, fmt.Errorf("admit spend: %w: channel and call id are required", ErrInvalidEvent)
	}
	hold.Day = UTCDay(hold.Day)
	var tot SpendTotals
	admitted := false
	byChannel, byPerson := lim.Channel >= 0, lim.Person >= 0 && hold.Person != ""
	if !byChannel && !byPerson {
		hold.Kind = SpendHold
		if err := insertSpend(ctx, s.pool, hold); err != nil {
			return SpendTotals{}, false, fmt.Errorf("admit spend in %s: %w", hold.Channel, err)
		}
		return tot, true, nil
	}
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		// Always the channel's lock first, then the person's: no two admissions wait on each other in a cycle.
		if byChannel {
			if err := lockSpent(ctx, tx, "channel", hold.Channel, hold.Day, sqlSpentChannel, &tot.Channel); err != nil {
				return err
			}
		}
		if byPerson {
			if err := lockSpent(ctx, tx, "person", hold.Person, hold.Day, sqlSpentPerson, &tot.Person); err != nil {
				return err
			}
		}
		row := hold
		row.Kind, admitted = SpendHold, true
		switch {
		case lim.Channel >= 0 && tot.Channel+hold.CostMicros > lim.Channel:
			row.Kind, row.Reason, admitted = SpendRefused, "channel", false
		case lim.Person >= 0 && hold.Person != "" && tot.Person+hold.CostMicros > lim.Person:
			row.Kind, row.Reason, admitted = SpendRefused, "person", false
		}
		return insertSpend(ctx, tx, row)
	})
	if err != nil {
		return SpendTotals{}, false, fmt.Errorf("admit spend in %s: %w", hold.Channel, err)
	}
	return tot, admitted, nil
}

// lockSpent takes the lock of one budget's day in tx, then reads its spend (sql: sqlSpentChannel
// or sqlSpentPerson) into total.
func lockSpent(ctx context.Context, tx pgx.Tx, scope, subject string, day time.Time, sql string, total *int64) error {
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, spendLock(scope, subject, day)); err != nil {
		return err
	}
	return tx.QueryRow(ctx, sql, subject, day).Scan(total)
}

// dbExec is a pool or a transaction.
type dbExec interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

func insertSpend(ctx context.Context, db dbExec, r Spend) error {
	var sid any
	if r.SessionID != uuid.Nil {
		sid = r.SessionID
	}
	_, err := db.Exec(ctx, sqlInsertSpend, r.CallID, r.Kind, UTCDay(r.Day), r.Channel, r.Person, sid, r.Turn, r.Purpose,
		r.Provider, r.Model, r.InputTokens, r.OutputTokens, r.CacheReadTokens, r.CacheWriteTokens, r.CostMicros, r.Reason, r.Source)
	return err
}

// ChargeSpend records what an admitted call cost (kind SpendCharge, same CallID and day as
// its hold). Recording the same call's charge again changes nothing.
func (s *Store) ChargeSpend(ctx context.Context, charge Spend) error {
	charge.Kind = SpendCharge
	if err := insertSpend(ctx, s.pool, charge); err != nil {
		return fmt.Errorf("charge call %s in %s: %w", charge.CallID, charge.Channel, err)
	}
	return nil
}

const sqlSessionSpend = `SELECT call_id, kind, day, channel, person, session_id, turn, purpose, provider, model,
  input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, cost_micros, reason, source, at
FROM model_spend WHERE session_id = $1 ORDER BY id`

// SessionSpend returns the spend rows of the model calls of session id — holds, charges and
// refusals — in the order they were written.
func (s *Store) SessionSpend(ctx context.Context, id ID) ([]Spend, error) {
	rows, err := s.pool.Query(ctx, sqlSessionSpend, id)
	if err != nil {
		return nil, fmt.Errorf("read the spend of session %s: %w", id, err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Spend, error) {
		var sp Spend
		var sid *uuid.UUID
		err := r.Scan(&sp.CallID, &sp.Kind, &sp.Day, &sp.Channel, &sp.Person, &sid, &sp.Turn, &sp.Purpose, &sp.Provider, &sp.Model,
			&sp.InputTokens, &sp.OutputTokens, &sp.CacheReadTokens, &sp.CacheWriteTokens, &sp.CostMicros, &sp.Reason, &sp.Source, &sp.At)
		if sid != nil {
			sp.SessionID = *sid
		}
		return sp, err
	})
	if err != nil {
		return nil, fmt.Errorf("read the spend of session %s: %w", id, err)
	}
	return out, nil
}

// Spent returns a channel's and a person's spend on day (person "": none).
func (s *Store) Spent(ctx context.Context, channel, person string, day time.Time) (SpendTotals, error) {
	var tot SpendTotals
	day = UTCDay(day)
	if err := s.pool.QueryRow(ctx, sqlSpentChannel, channel, day).Scan(&tot.Channel); err != nil {
		return tot, fmt.Errorf("spend of %s: %w", channel, err)
	}
	if person != "" {
		if err := s.pool.QueryRow(ctx, sqlSpentPerson, person, day).Scan(&tot.Person); err != nil {
			return tot, fmt.Errorf("spend of %s: %w", person, err)
		}
	}
	return tot, nil
}

// BudgetRaise is an admin's raise of one budget for one UTC day.
type BudgetRaise struct {
	Day      time.Time
	Scope    string // "channel" or "person"
	Subject  string // the channel id, or the person's user id
	Channel  string // where it was raised
	Amount   int64  // micros
	RaisedBy string
	At       time.Time
	// Team is the channel's team, for its ledger ("": the team of the channel's sessions).
	Team string
	// Via is the path of the raise (ViaSlash, ViaCLI, ViaWeb, ViaFile); "" is ViaSlash.
	Via string
}

const sqlRaiseBudget = `INSERT INTO budget_raises (day, scope, subject, channel, amount, raised_by)
VALUES ($1, $2, $3, $4, $5, $6) RETURNING id, at, logbook_ledger($7, $4)`

// RaiseBudget records r: a budget_raised event of the ledger of the channel it was raised in
// and, in the same transaction, its row.
func (s *Store) RaiseBudget(ctx context.Context, r BudgetRaise) (BudgetRaise, error) {
	r.Via = cmp.Or(r.Via, ViaSlash)
	if (r.Scope != "channel" && r.Scope != "person") || r.Subject == "" || r.Channel == "" || r.RaisedBy == "" || r.Amount <= 0 || !validVia(r.Via) {
		return r, fmt.Errorf("raise budget: %w: scope, subject, channel, who, a known way and a positive amount are required", ErrInvalidEvent)
	}
	r.Day = UTCDay(r.Day)
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var id int64
		var ledger ID
		if err := tx.QueryRow(ctx, sqlRaiseBudget, r.Day, r.Scope, r.Subject, r.Channel, r.Amount, r.RaisedBy, r.Team).Scan(&id, &r.At, &ledger); err != nil {
			return err
		}
		_, err := s.appendLedger(ctx, tx, ledger, TypeBudgetRaised, ledgerActor(r.RaisedBy, r.Via), "budget/"+strconv.FormatInt(id, 10),
			BudgetRaised{ID: id, Day: r.Day.Format(time.DateOnly), Scope: r.Scope, Subject: r.Subject, Amount: r.Amount, By: r.RaisedBy, Via: r.Via, At: r.At})
		return err
	})
	if err != nil {
		return r, fmt.Errorf("raise the %s budget of %s: %w", r.Scope, r.Subject, err)
	}
	return r, nil
}

const sqlRaised = `SELECT coalesce(sum(amount), 0)::bigint FROM budget_raises WHERE scope = $1 AND subject = $2 AND day = $3`

// Raised is the sum of the raises of one budget (scope, subject) on day, in micros.
func (s *Store) Raised(ctx context.Context, scope, subject string, day time.Time) (int64, error) {
	var n int64
	if err := s.pool.QueryRow(ctx, sqlRaised, scope, subject, UTCDay(day)).Scan(&n); err != nil {
		return 0, fmt.Errorf("raises of the %s budget of %s: %w", scope, subject, err)
	}
	return n, nil
}

// UsageRow is the spend and tokens of one channel, person and day: tokens of the calls that
// answered (charges), cost of those and of holds still without a charge.
type UsageRow struct {
	Day              time.Time
	Channel, Person  string
	Calls            int64
	InputTokens      int64
	OutputTokens     int64
	CacheReadTokens  int64
	CacheWriteTokens int64
	CostMicros       int64
	Refused          int64 // calls the budget did not let start
	// Estimated are the charges (among Calls) of calls that failed part way, whose tokens
	// logbook estimated in part (Spend.Source UsageEstimated).
	Estimated int64
	// EvalCalls and EvalCostMicros are the charges (among Calls, CostMicros) of what-if
	// replays' model calls (purpose "eval_…": `logbook replay --from`, `logbook eval`).
	EvalCalls      int64
	EvalCostMicros int64
}

// EvalPurpose prefixes the purpose of a what-if's model calls in model_spend.
const EvalPurpose = "eval_"

const sqlUsage = `SELECT day, channel, person,
  count(*) FILTER (WHERE kind = 'charge')::bigint,
  coalesce(sum(input_tokens) FILTER (WHERE kind = 'charge'), 0)::bigint,
  coalesce(sum(output_tokens) FILTER (WHERE kind = 'charge'), 0)::bigint,
  coalesce(sum(cache_read_tokens) FILTER (WHERE kind = 'charge'), 0)::bigint,
  coalesce(sum(cache_write_tokens) FILTER (WHERE kind = 'charge'), 0)::bigint,
  coalesce(sum(cost_micros) FILTER (WHERE kind = 'charge' OR (kind = 'hold' AND NOT EXISTS (
    SELECT 1 FROM model_spend c WHERE c.call_id = s.call_id AND c.kind = 'charge'))), 0)::bigint,
  count(*) FILTER (WHERE kind = 'refused')::bigint,
  count(*) FILTER (WHERE kind = 'charge' AND source = 'estimate')::bigint,
  count(*) FILTER (WHERE kind = 'charge' AND purpose LIKE 'eval\_%')::bigint,
  coalesce(sum(cost_micros) FILTER (WHERE purpose LIKE 'eval\_%' AND (kind = 'charge' OR (kind = 'hold' AND NOT EXISTS (
    SELECT 1 FROM model_spend c WHERE c.call_id = s.call_id AND c.kind = 'charge')))), 0)::bigint
FROM model_spend s
WHERE day >= $1 AND day < $2 AND ($3 = '' OR channel = $3)
GROUP BY day, channel, person ORDER BY day, channel, person`

// Usage returns the spend per channel, person and day for the days in [from, to) (UTC days;
// channel "": every channel), ordered by day, channel and person.
func (s *Store) Usage(ctx context.Context, from, to time.Time, channel string) ([]UsageRow, error) {
	rows, err := s.pool.Query(ctx, sqlUsage, UTCDay(from), UTCDay(to), channel)
	if err != nil {
		return nil, fmt.Errorf("read usage: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (UsageRow, error) {
		var u UsageRow
		err := r.Scan(&u.Day, &u.Channel, &u.Person, &u.Calls, &u.InputTokens, &u.OutputTokens,
			&u.CacheReadTokens, &u.CacheWriteTokens, &u.CostMicros, &u.Refused, &u.Estimated, &u.EvalCalls, &u.EvalCostMicros)
		return u, err
	})
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("read usage: %w", err)
	}
	return out, nil
}
