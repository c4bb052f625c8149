package session

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Rebuilding a channel's projections from its ledger (issue 49): the ledger is the source of
// truth, so a projection row that disagrees with it (see CheckLedgers) is made to agree with
// it again — a missing row inserted with its original id, a differing one rewritten, a row
// without a ledger event deleted — in one transaction that holds each ledger's append lock
// and first verifies each ledger's chain. The projection tables are append-only by trigger,
// so the rewrite runs with session_replication_role = replica: a superuser's act (or a role
// granted SET on that parameter that owns the tables).
//
// What the ledger cannot give back stays a finding (Rebuild.Unrebuilt): an mcp_tokens row
// whose connect is on the ledger but whose row is gone (the sealed token is never in the
// ledger). A purged note whose row is gone comes back as purged: its id, channel, team (the
// ledger's), author (the event's actor) and time (the event's); its text, session and call
// went with the payload.

// ErrRebuildForbidden is returned when the connection's role may not rewrite the projection
// tables behind their append-only triggers.
var ErrRebuildForbidden = errors.New("rebuilding the projections needs a superuser " +
	"(or a role that owns the projection tables and was granted SET ON PARAMETER session_replication_role)")

// BrokenLedgerError is a channel's ledger whose chain does not verify: its projections are
// not rebuilt from it.
type BrokenLedgerError struct {
	Channel string
	Session ID
	Seq     int64
	Reason  string
}

func (e *BrokenLedgerError) Error() string {
	return fmt.Sprintf("the ledger of channel %s (session %s) does not verify at seq %d: %s; its projections are not rebuilt from it",
		e.Channel, e.Session, e.Seq, e.Reason)
}

// Rebuild is what RebuildProjections found and did.
type Rebuild struct {
	DryRun  bool
	Ledgers int // channels' ledgers whose chains verified
	// Findings are the rows that disagreed with their ledger before: what a dry run would
	// change.
	Findings []LedgerFinding
	// Rows is how many projection rows were inserted, rewritten or deleted (0 in a dry run).
	Rows int64
	// Unrebuilt are the findings left after the rebuild: what the ledger cannot give back.
	Unrebuilt []LedgerFinding
}

const sqlRebuildLedgers = `SELECT id, channel_id FROM sessions
 WHERE thread_ts = '` + LedgerThread + `' AND by_thread AND ($1 = '' OR channel_id = $1) ORDER BY channel_id`

// sqlRebuildLedger is the ledger events of the rebuild's channel ($1; empty for every channel),
// as the statements below read them.
const sqlRebuildLedger = `WITH l AS (
    SELECT s.channel_id AS channel, s.team_id AS team, e.seq, e.type, e.actor_kind, e.actor_id, e.created_at,
           e.idempotency_key AS key, e.payload AS p
      FROM sessions s JOIN events e ON e.session_id = s.id
     WHERE s.thread_ts = '` + LedgerThread + `' AND s.by_thread AND ($1 = '' OR s.channel_id = $1)
) `

// sqlRebuildConflicts finds what makes a ledger an unsafe source for the rows of the
// rebuild's channel ($1; empty: every channel's): an event whose key does not name a row of
// its own type's table, a key that two channels' ledgers both hold, or a key naming a row
// stored under another channel. The upserts take a row's id from its event's key, so any of
// these would let one channel's ledger rewrite another channel's rows.
const sqlRebuildConflicts = `WITH l AS (
    SELECT s.channel_id AS channel, e.type, e.idempotency_key AS key
      FROM sessions s JOIN events e ON e.session_id = s.id
     WHERE s.thread_ts = '` + LedgerThread + `' AND s.by_thread
), k AS (
    SELECT key, array_agg(DISTINCT channel ORDER BY channel) AS channels,
           bool_or(key NOT LIKE CASE type WHEN 'setting_changed' THEN 'setting/%' WHEN 'note_added' THEN 'note/%'
               WHEN 'note_forgotten' THEN 'forgot/%' WHEN 'repo_set' THEN 'repo/%' WHEN 'budget_raised' THEN 'budget/%'
               WHEN 'schedule_added' THEN 'schedule/%' WHEN 'schedule_removed' THEN 'unschedule/%'
               WHEN 'connector_connected' THEN 'connect/%' WHEN 'automation_paused' THEN 'pause/%'
               WHEN 'automation_resumed' THEN 'pause/%' ELSE '%' END) AS misnamed
      FROM l GROUP BY key
), r AS (
    SELECT 'setting/' || id AS key, channel FROM channel_settings
    UNION ALL SELECT 'note/' || id, channel FROM channel_memory
    UNION ALL SELECT 'forgot/' || f.note_id, m.channel FROM channel_memory_forgotten f JOIN channel_memory m ON m.id = f.note_id
    UNION ALL SELECT 'repo/' || id, channel FROM channel_repos
    UNION ALL SELECT 'budget/' || id, channel FROM budget_raises
    UNION ALL SELECT 'schedule/' || id, channel FROM schedules
    UNION ALL SELECT 'unschedule/' || x.schedule_id, sc.channel FROM schedule_removals x JOIN schedules sc ON sc.id = x.schedule_id
    UNION ALL SELECT 'pause/' || id, channel FROM automation_pauses WHERE channel <> ''
)
SELECT k.key, array_to_string(k.channels, ', '), coalesce(r.channel, ''), k.misnamed
  FROM k LEFT JOIN r ON r.key = k.key
 WHERE ($1 = '' OR $1 = ANY (k.channels))
   AND (k.misnamed OR cardinality(k.channels) > 1 OR (r.channel IS NOT NULL AND r.channel <> k.channels[1]))
 ORDER BY k.key`

// ConflictingLedgerError is a ledger event that would rewrite a row it does not own (see
// sqlRebuildConflicts): the projections are not rebuilt while one exists.
type ConflictingLedgerError struct {
	Key, Ledgers, RowChannel string
	Misnamed                 bool
}

func (e *ConflictingLedgerError) Error() string {
	switch {
	case e.Misnamed:
		return fmt.Sprintf("an event of the ledger of %s has the key %s, which is not its type's: the projections are not rebuilt", e.Ledgers, e.Key)
	case e.RowChannel != "" && !strings.Contains(e.Ledgers, ", "):
		return fmt.Sprintf("the ledger of %s holds %s, a row of channel %s: the projections are not rebuilt", e.Ledgers, e.Key, e.RowChannel)
	}
	return fmt.Sprintf("the ledgers of %s all hold %s: the projections are not rebuilt", e.Ledgers, e.Key)
}

// sqlRebuild are the rewrite's statements, in order: rows without a ledger event deleted
// (the rows that refer to others first), then every row upserted from its event (the rows
// referred to first). Each changes only rows that differ. The keys are those of
// migrations/00230 and sqlCheckLedgers.
var sqlRebuild = []string{
	// Deletes.
	`DELETE FROM channel_memory_forgotten f
  WHERE NOT EXISTS (SELECT 1 FROM l WHERE l.type = 'note_forgotten' AND l.key = 'forgot/' || f.note_id)
    AND ($1 = '' OR EXISTS (SELECT 1 FROM channel_memory m WHERE m.id = f.note_id AND m.channel = $1))`,
	`DELETE FROM schedule_removals r
  WHERE NOT EXISTS (SELECT 1 FROM l WHERE l.type = 'schedule_removed' AND l.key = 'unschedule/' || r.schedule_id)
    AND ($1 = '' OR EXISTS (SELECT 1 FROM schedules sc WHERE sc.id = r.schedule_id AND sc.channel = $1))`,
	`DELETE FROM channel_settings c WHERE ($1 = '' OR c.channel = $1)
    AND NOT EXISTS (SELECT 1 FROM l WHERE l.type = 'setting_changed' AND l.key = 'setting/' || c.id)`,
	`DELETE FROM channel_memory m WHERE ($1 = '' OR m.channel = $1)
    AND NOT EXISTS (SELECT 1 FROM l WHERE l.type = 'note_added' AND l.key = 'note/' || m.id)`,
	`DELETE FROM channel_repos r WHERE ($1 = '' OR r.channel = $1)
    AND NOT EXISTS (SELECT 1 FROM l WHERE l.type = 'repo_set' AND l.key = 'repo/' || r.id)`,
	`DELETE FROM budget_raises b WHERE ($1 = '' OR b.channel = $1)
    AND NOT EXISTS (SELECT 1 FROM l WHERE l.type = 'budget_raised' AND l.key = 'budget/' || b.id)`,
	`DELETE FROM schedules sc WHERE ($1 = '' OR sc.channel = $1)
    AND NOT EXISTS (SELECT 1 FROM l WHERE l.type = 'schedule_added' AND l.key = 'schedule/' || sc.id)`,
	`DELETE FROM automation_pauses a WHERE a.channel <> '' AND ($1 = '' OR a.channel = $1)
    AND NOT EXISTS (SELECT 1 FROM l WHERE l.type IN ('automation_paused', 'automation_resumed') AND l.key = 'pause/' || a.id)`,
	// A connector connected behind the ledger's back goes, token and all.
	`DELETE FROM mcp_tokens t WHERE ($1 = '' OR t.channel = $1)
    AND NOT EXISTS (SELECT 1 FROM l WHERE l.type = 'connector_connected' AND l.channel = t.channel AND l.p->>'server' = t.server)`,

	// Upserts.
	`INSERT INTO channel_settings AS c (id, team, channel, name, old_value, value, set_by, set_at) OVERRIDING SYSTEM VALUE
 SELECT split_part(l.key, '/', 2)::bigint, l.p->>'team', l.channel, l.p->>'name', l.p->>'old', l.p->>'new', l.p->>'by', (l.p->>'at')::timestamptz
   FROM l WHERE l.type = 'setting_changed' AND l.p IS NOT NULL
 ON CONFLICT (id) DO UPDATE SET team = EXCLUDED.team, channel = EXCLUDED.channel, name = EXCLUDED.name, old_value = EXCLUDED.old_value,
        value = EXCLUDED.value, set_by = EXCLUDED.set_by, set_at = EXCLUDED.set_at
  WHERE (c.team, c.channel, c.name, c.old_value, c.value, c.set_by, c.set_at)
        IS DISTINCT FROM (EXCLUDED.team, EXCLUDED.channel, EXCLUDED.name, EXCLUDED.old_value, EXCLUDED.value, EXCLUDED.set_by, EXCLUDED.set_at)`,
	`INSERT INTO channel_memory AS m (id, team, channel, text, by_kind, by_id, session_id, thread_ts, call_id, created_at, purged_at) OVERRIDING SYSTEM VALUE
 SELECT split_part(l.key, '/', 2)::bigint, l.p->>'team', l.channel, l.p->>'text', l.p->>'by_kind', l.p->>'by', (l.p->>'session')::uuid,
        coalesce(l.p->>'thread_ts', ''), l.p->>'call_id', (l.p->>'at')::timestamptz, NULL
   FROM l WHERE l.type = 'note_added' AND l.p IS NOT NULL
 ON CONFLICT (id) DO UPDATE SET team = EXCLUDED.team, channel = EXCLUDED.channel, text = EXCLUDED.text, by_kind = EXCLUDED.by_kind,
        by_id = EXCLUDED.by_id, session_id = EXCLUDED.session_id, thread_ts = EXCLUDED.thread_ts, call_id = EXCLUDED.call_id,
        created_at = EXCLUDED.created_at, purged_at = NULL
  WHERE (m.team, m.channel, m.text, m.by_kind, m.by_id, m.session_id, m.thread_ts, m.call_id, m.created_at, m.purged_at)
        IS DISTINCT FROM (EXCLUDED.team, EXCLUDED.channel, EXCLUDED.text, EXCLUDED.by_kind, EXCLUDED.by_id, EXCLUDED.session_id,
                          EXCLUDED.thread_ts, EXCLUDED.call_id, EXCLUDED.created_at, NULL::timestamptz)`,
	// A purged note: its text stays gone; a lost row comes back from the event's header.
	`INSERT INTO channel_memory AS m (id, team, channel, text, by_kind, by_id, session_id, thread_ts, call_id, created_at, purged_at) OVERRIDING SYSTEM VALUE
 SELECT split_part(l.key, '/', 2)::bigint, l.team, l.channel, NULL, CASE l.actor_kind WHEN 'bot' THEN 'agent' ELSE 'user' END, l.actor_id,
        NULL, '', NULL, l.created_at, clock_timestamp()
   FROM l WHERE l.type = 'note_added' AND l.p IS NULL
 ON CONFLICT (id) DO UPDATE SET channel = EXCLUDED.channel, text = NULL, purged_at = coalesce(m.purged_at, EXCLUDED.purged_at)
  WHERE m.text IS NOT NULL OR m.channel <> EXCLUDED.channel`,
	`INSERT INTO channel_memory_forgotten AS f (note_id, forgotten_by, forgotten_at)
 SELECT split_part(l.key, '/', 2)::bigint, l.p->>'by', (l.p->>'at')::timestamptz
   FROM l WHERE l.type = 'note_forgotten' AND l.p IS NOT NULL
 ON CONFLICT (note_id) DO UPDATE SET forgotten_by = EXCLUDED.forgotten_by, forgotten_at = EXCLUDED.forgotten_at
  WHERE (f.forgotten_by, f.forgotten_at) IS DISTINCT FROM (EXCLUDED.forgotten_by, EXCLUDED.forgotten_at)`,
	`INSERT INTO channel_repos AS r (id, team, channel, url, branch, set_by, set_at) OVERRIDING SYSTEM VALUE
 SELECT split_part(l.key, '/', 2)::bigint, l.p->>'team', l.channel, l.p->>'url', l.p->>'branch', l.p->>'by', (l.p->>'at')::timestamptz
   FROM l WHERE l.type = 'repo_set' AND l.p IS NOT NULL
 ON CONFLICT (id) DO UPDATE SET team = EXCLUDED.team, channel = EXCLUDED.channel, url = EXCLUDED.url, branch = EXCLUDED.branch,
        set_by = EXCLUDED.set_by, set_at = EXCLUDED.set_at
  WHERE (r.team, r.channel, r.url, r.branch, r.set_by, r.set_at)
        IS DISTINCT FROM (EXCLUDED.team, EXCLUDED.channel, EXCLUDED.url, EXCLUDED.branch, EXCLUDED.set_by, EXCLUDED.set_at)`,
	`INSERT INTO budget_raises AS b (id, day, scope, subject, channel, amount, raised_by, at) OVERRIDING SYSTEM VALUE
 SELECT split_part(l.key, '/', 2)::bigint, (l.p->>'day')::date, l.p->>'scope', l.p->>'subject', l.channel, (l.p->>'amount')::bigint,
        l.p->>'by', (l.p->>'at')::timestamptz
   FROM l WHERE l.type = 'budget_raised' AND l.p IS NOT NULL
 ON CONFLICT (id) DO UPDATE SET day = EXCLUDED.day, scope = EXCLUDED.scope, subject = EXCLUDED.subject, channel = EXCLUDED.channel,
        amount = EXCLUDED.amount, raised_by = EXCLUDED.raised_by, at = EXCLUDED.at
  WHERE (b.day, b.scope, b.subject, b.channel, b.amount, b.raised_by, b.at)
        IS DISTINCT FROM (EXCLUDED.day, EXCLUDED.scope, EXCLUDED.subject, EXCLUDED.channel, EXCLUDED.amount, EXCLUDED.raised_by, EXCLUDED.at)`,
	`INSERT INTO schedules AS sc (id, team, channel, spec, prompt, added_by, added_at) OVERRIDING SYSTEM VALUE
 SELECT split_part(l.key, '/', 2)::bigint, l.p->>'team', l.channel, l.p->>'spec', l.p->>'prompt', l.p->>'by', (l.p->>'at')::timestamptz
   FROM l WHERE l.type = 'schedule_added' AND l.p IS NOT NULL
 ON CONFLICT (id) DO UPDATE SET team = EXCLUDED.team, channel = EXCLUDED.channel, spec = EXCLUDED.spec, prompt = EXCLUDED.prompt,
        added_by = EXCLUDED.added_by, added_at = EXCLUDED.added_at
  WHERE (sc.team, sc.channel, sc.spec, sc.prompt, sc.added_by, sc.added_at)
        IS DISTINCT FROM (EXCLUDED.team, EXCLUDED.channel, EXCLUDED.spec, EXCLUDED.prompt, EXCLUDED.added_by, EXCLUDED.added_at)`,
	`INSERT INTO schedule_removals AS r (schedule_id, removed_by, removed_at, reason)
 SELECT split_part(l.key, '/', 2)::bigint, l.p->>'by', (l.p->>'at')::timestamptz, coalesce(l.p->>'reason', '')
   FROM l WHERE l.type = 'schedule_removed' AND l.p IS NOT NULL
 ON CONFLICT (schedule_id) DO UPDATE SET removed_by = EXCLUDED.removed_by, removed_at = EXCLUDED.removed_at, reason = EXCLUDED.reason
  WHERE (r.removed_by, r.removed_at, r.reason) IS DISTINCT FROM (EXCLUDED.removed_by, EXCLUDED.removed_at, EXCLUDED.reason)`,
	`INSERT INTO automation_pauses AS a (id, kind, name, action, channel, actor, reason, at) OVERRIDING SYSTEM VALUE
 SELECT split_part(l.key, '/', 2)::bigint, l.p->>'kind', l.p->>'name', substr(l.type, length('automation_') + 1), l.channel, l.p->>'by',
        coalesce(l.p->>'reason', ''), (l.p->>'at')::timestamptz
   FROM l WHERE l.type IN ('automation_paused', 'automation_resumed') AND l.p IS NOT NULL
 ON CONFLICT (id) DO UPDATE SET kind = EXCLUDED.kind, name = EXCLUDED.name, action = EXCLUDED.action, channel = EXCLUDED.channel,
        actor = EXCLUDED.actor, reason = EXCLUDED.reason, at = EXCLUDED.at
  WHERE (a.kind, a.name, a.action, a.channel, a.actor, a.reason, a.at)
        IS DISTINCT FROM (EXCLUDED.kind, EXCLUDED.name, EXCLUDED.action, EXCLUDED.channel, EXCLUDED.actor, EXCLUDED.reason, EXCLUDED.at)`,
	// A connector's who and when, from its latest connect; never its sealed token.
	`UPDATE mcp_tokens t SET connected_by = d.who, connected_at = d.at
   FROM (SELECT DISTINCT ON (l.channel, l.p->>'server') l.channel, l.p->>'server' AS server, l.p->>'by' AS who, (l.p->>'at')::timestamptz AS at
           FROM l WHERE l.type = 'connector_connected' AND l.p IS NOT NULL ORDER BY l.channel, l.p->>'server', l.seq DESC) d
  WHERE t.channel = d.channel AND t.server = d.server AND (t.connected_by, t.connected_at) IS DISTINCT FROM (d.who, d.at)`,
}

// RebuildProjections makes the projection rows of channel's ledger (channel "": every
// ledger's) agree with it, or with dryRun only says what disagrees. It verifies each
// ledger's chain first and refuses (a *BrokenLedgerError per broken ledger, joined) to
// rebuild from one that does not verify; ErrNotFound when channel has no ledger;
// ErrRebuildForbidden when the role may not rewrite the tables. A dry run needs only read
// access.
func (s *Store) RebuildProjections(ctx context.Context, channel string, dryRun bool) (Rebuild, error) {
	r := Rebuild{DryRun: dryRun}
	opts := pgx.TxOptions{}
	if dryRun {
		opts = pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}
	}
	err := pgx.BeginTxFunc(ctx, s.pool, opts, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, sqlRebuildLedgers, channel)
		if err != nil {
			return err
		}
		ledgers := map[ID]string{}
		var order []ID
		var id ID
		var ch string
		if _, err := pgx.ForEachRow(rows, []any{&id, &ch}, func() error {
			ledgers[id] = ch
			order = append(order, id)
			return nil
		}); err != nil {
			return err
		}
		if channel != "" && len(order) == 0 {
			return fmt.Errorf("ledger of %s: %w", channel, ErrNotFound)
		}
		if !dryRun {
			// No memory purge, and no append to these ledgers (so no projection write that
			// goes with one), until the rebuild commits.
			if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, LockRetention); err != nil {
				return err
			}
			for _, id := range order {
				if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended($1::text, $2))`, id, LockSessionSeed); err != nil {
					return err
				}
			}
		}
		var broken []error
		for _, id := range order {
			v, err := verifyChain(ctx, tx, id)
			if err != nil {
				return err
			}
			if !v.OK {
				broken = append(broken, &BrokenLedgerError{Channel: ledgers[id], Session: id, Seq: v.BrokenSeq, Reason: v.Reason})
			}
		}
		if len(broken) > 0 {
			return errors.Join(broken...)
		}
		rows, err = tx.Query(ctx, sqlRebuildConflicts, channel)
		if err != nil {
			return err
		}
		var conflicts []error
		var c ConflictingLedgerError
		if _, err := pgx.ForEachRow(rows, []any{&c.Key, &c.Ledgers, &c.RowChannel, &c.Misnamed}, func() error {
			cc := c
			conflicts = append(conflicts, &cc)
			return nil
		}); err != nil {
			return err
		}
		if len(conflicts) > 0 {
			return errors.Join(conflicts...)
		}
		r.Ledgers = len(order)
		if r.Findings, err = checkLedgers(ctx, tx, channel); err != nil {
			return err
		}
		if dryRun || len(r.Findings) == 0 {
			return nil
		}
		var role string
		if err := tx.QueryRow(ctx, `SELECT current_user`).Scan(&role); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `SET LOCAL session_replication_role = replica`); err != nil {
			return forbidden(role, err)
		}
		for _, q := range sqlRebuild {
			tag, err := tx.Exec(ctx, sqlRebuildLedger+q, channel)
			if err != nil {
				return forbidden(role, err)
			}
			r.Rows += tag.RowsAffected()
		}
		r.Unrebuilt, err = checkLedgers(ctx, tx, channel)
		return err
	})
	if err != nil {
		what := "every channel"
		if channel != "" {
			what = "channel " + channel
		}
		return Rebuild{DryRun: dryRun}, fmt.Errorf("rebuild the projections of %s: %w", what, err)
	}
	return r, nil
}

// forbidden translates a refusal for lack of privilege (SQLSTATE 42501) into
// ErrRebuildForbidden, naming the role refused.
func forbidden(role string, err error) error {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "42501" {
		return err
	}
	return fmt.Errorf("%w: role %s was refused (%s)", ErrRebuildForbidden, role, pe.Message)
}
