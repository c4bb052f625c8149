package session

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// A channel's ledger (migrations/00230) is the stream of the changes that shape what the agent
// does in the channel: a session whose thread ts is LedgerThread, appended to by the same
// logbook_append as a thread, so it has the log's chain, verification, checkpoints, exports
// and legal holds. The tables the agent reads (channel_settings, channel_memory,
// channel_memory_forgotten, channel_repos, budget_raises) are its projections: each row is
// written in the transaction that appends its ledger event, the event's idempotency key
// names the row, and CheckLedgers finds a row that disagrees with its event, or either one
// without the other.

// LedgerThread is the thread ts of a channel's ledger session. No Slack ts looks like it, so
// no thread's session is ever a ledger.
const LedgerThread = "ledger"

// Through what a change of a channel's ledger came (the payloads' "via").
const (
	ViaSlash = "slash_command" // a person's /logbook command
	ViaAgent = "agent_tool"    // the agent's tool (remember)
	ViaCLI   = "cli"           // an operator's logbook command
	ViaWeb   = "web"           // the web pages
	ViaFile  = "file"          // a settings file (config apply)
	// ViaLogbook: logbook itself (a schedule it stopped, its actor the system).
	ViaLogbook = "logbook"
)

// Ledger event types (a channel's ledger; never in a thread's session).
const (
	TypeSettingChanged Type = "setting_changed"
	TypeNoteAdded      Type = "note_added"
	TypeNoteForgotten  Type = "note_forgotten"
	TypeRepoSet        Type = "repo_set"
	TypeBudgetRaised   Type = "budget_raised"
	// Schedules (bot/schedule): added, and removed by a person or stopped by logbook. A
	// schedule is never changed or paused in place today: a change is a removal and an add.
	TypeScheduleAdded   Type = "schedule_added"
	TypeScheduleRemoved Type = "schedule_removed"
	// A remote MCP server connected for the channel through the web pages (bot/connectors).
	// Its token is never in the ledger. There is no disconnect yet.
	TypeConnectorConnected Type = "connector_connected"
	// A schedule or hook paused by logbook after failures in a row, or resumed by an admin
	// (the row of automation_pauses; issue 48).
	TypeAutomationPaused  Type = "automation_paused"
	TypeAutomationResumed Type = "automation_resumed"
)

// SettingChanged is a change of a channel's setting (type setting_changed; row ID of
// channel_settings). Old and New are nil for the environment's default.
type SettingChanged struct {
	ID   int64     `json:"id"`
	Team string    `json:"team"`
	Name string    `json:"name"`
	Old  *string   `json:"old"`
	New  *string   `json:"new"`
	By   string    `json:"by"`
	Via  string    `json:"via"`
	At   time.Time `json:"at"` // the row's set_at
}

// NoteAdded is a note added to a channel's memory (type note_added; row ID of
// channel_memory). Its payload is emptied when retention purges the note's text.
type NoteAdded struct {
	ID       int64     `json:"id"`
	Team     string    `json:"team"`
	Text     string    `json:"text"`
	ByKind   string    `json:"by_kind"`
	By       string    `json:"by"`
	Session  *ID       `json:"session,omitempty"`
	ThreadTS string    `json:"thread_ts,omitempty"`
	CallID   string    `json:"call_id,omitempty"`
	Via      string    `json:"via"`
	At       time.Time `json:"at"`
}

// NoteForgotten is a note removed from a channel's memory (type note_forgotten; the row of
// channel_memory_forgotten is the note's).
type NoteForgotten struct {
	Note int64     `json:"note"`
	By   string    `json:"by"`
	Via  string    `json:"via"`
	At   time.Time `json:"at"`
}

// RepoSet is a channel's repository as set (type repo_set; row ID of channel_repos). URL ""
// says the channel has none.
type RepoSet struct {
	ID     int64     `json:"id"`
	Team   string    `json:"team"`
	URL    string    `json:"url"`
	Branch string    `json:"branch"`
	By     string    `json:"by"`
	Via    string    `json:"via"`
	At     time.Time `json:"at"`
}

// BudgetRaised is a raise of one budget for one UTC day (type budget_raised; row ID of
// budget_raises), in the ledger of the channel it was raised in. Amount is in micros.
type BudgetRaised struct {
	ID      int64     `json:"id"`
	Day     string    `json:"day"` // YYYY-MM-DD
	Scope   string    `json:"scope"`
	Subject string    `json:"subject"`
	Amount  int64     `json:"amount"`
	By      string    `json:"by"`
	Via     string    `json:"via"`
	At      time.Time `json:"at"`
}

// ScheduleAdded is a schedule added in the channel (type schedule_added; row ID of
// schedules).
type ScheduleAdded struct {
	ID     int64     `json:"id"`
	Team   string    `json:"team"`
	Spec   string    `json:"spec"`
	Prompt string    `json:"prompt"`
	By     string    `json:"by"`
	Via    string    `json:"via"`
	At     time.Time `json:"at"`
}

// ScheduleRemoved is a schedule removed (type schedule_removed; the row of
// schedule_removals is the schedule's). Reason is logbook's when it stopped it (By "system").
type ScheduleRemoved struct {
	Schedule int64     `json:"schedule"`
	By       string    `json:"by"`
	Reason   string    `json:"reason,omitempty"`
	Via      string    `json:"via"`
	At       time.Time `json:"at"`
}

// ConnectorConnected is a remote MCP server connected for the channel (type
// connector_connected; the mcp_tokens row of (Server, channel) while no later connect
// replaced it). Never the token.
type ConnectorConnected struct {
	Server string    `json:"server"`
	By     string    `json:"by"`
	Via    string    `json:"via"`
	At     time.Time `json:"at"`
}

// AutomationPauseChanged is a schedule or hook paused or resumed (types automation_paused
// and automation_resumed; row ID of automation_pauses): Kind "schedule" or "hook", Name the
// schedule's id or the hook's name, By the admin who resumed it or "system" for logbook's
// pause, Reason why logbook paused it.
type AutomationPauseChanged struct {
	ID     int64     `json:"id"`
	Kind   string    `json:"kind"`
	Name   string    `json:"name"`
	By     string    `json:"by"`
	Reason string    `json:"reason,omitempty"`
	Via    string    `json:"via"`
	At     time.Time `json:"at"`
}

// ledgerActor is who made a change: the agent (its bot id), an operator or a file (the
// system, by its name), or a person.
func ledgerActor(by, via string) Actor {
	switch via {
	case ViaAgent:
		return Actor{Kind: ActorBot, ID: by}
	case ViaCLI, ViaFile, ViaLogbook:
		return Actor{Kind: ActorSystem, ID: by}
	}
	return Actor{Kind: ActorUser, ID: by}
}

func validVia(via string) bool {
	switch via {
	case ViaSlash, ViaAgent, ViaCLI, ViaWeb, ViaFile, ViaLogbook:
		return true
	}
	return false
}

// appendLedger appends one event to the ledger session in tx (the transaction that writes
// its projection row), keyed by the row.
func (s *Store) appendLedger(ctx context.Context, tx pgx.Tx, ledger ID, typ Type, actor Actor, key string, payload any) (Event, error) {
	c, err := s.newAppendCall(ledger, AppendOptions{}, []NewEvent{{Type: typ, Actor: actor, IdempotencyKey: key, Payload: payload}})
	if err != nil {
		return Event{}, err
	}
	out, err := s.callAppend(ctx, tx, c)
	if err != nil {
		return Event{}, err
	}
	return out[0], nil
}

const sqlLedgerOf = `SELECT id FROM sessions WHERE channel_id = $1 AND thread_ts = '` + LedgerThread + `' AND by_thread`

// Ledger returns the session of the channel's ledger; ErrNotFound when nothing was ever
// changed in the channel. Read its events with Events, as a thread's.
func (s *Store) Ledger(ctx context.Context, channel string) (ID, error) {
	var id ID
	err := s.pool.QueryRow(ctx, sqlLedgerOf, channel).Scan(&id)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return id, fmt.Errorf("ledger of %s: %w", channel, ErrNotFound)
	case err != nil:
		return id, fmt.Errorf("ledger of %s: %w", channel, err)
	}
	return id, nil
}

const sqlLedgers = `SELECT id, channel_id FROM sessions WHERE thread_ts = '` + LedgerThread + `' AND by_thread`

// Ledgers returns every channel's ledger session, with its channel.
func (s *Store) Ledgers(ctx context.Context) (map[ID]string, error) {
	rows, err := s.pool.Query(ctx, sqlLedgers)
	if err != nil {
		return nil, fmt.Errorf("list the ledgers: %w", err)
	}
	out := map[ID]string{}
	var id ID
	var channel string
	_, err = pgx.ForEachRow(rows, []any{&id, &channel}, func() error {
		out[id] = channel
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list the ledgers: %w", err)
	}
	return out, nil
}

// LedgerFinding is a projection row that disagrees with its channel's ledger, or one without
// the other.
type LedgerFinding struct {
	Channel string
	Seq     int64  // the ledger event's seq; 0 when the row has none
	Change  string // the event type and row: "setting_changed 12"
	Reason  string
}

func (f LedgerFinding) String() string {
	at := "no ledger event"
	if f.Seq > 0 {
		at = fmt.Sprintf("seq %d", f.Seq)
	}
	return fmt.Sprintf("ledger of channel %s disagrees with its projection at %s (%s): %s", f.Channel, at, f.Change, f.Reason)
}

// sqlCheckLedgers pairs each projection row with its ledger event (by the event's
// idempotency key) and returns the pairs that disagree: (channel, seq or 0, type, row id,
// what). A purged note (text and payload emptied by retention) agrees when both are empty.
const sqlCheckLedgers = `
WITH l AS (
    SELECT s.channel_id AS channel, e.seq, e.type, e.idempotency_key AS key, e.payload AS p
      FROM sessions s JOIN events e ON e.session_id = s.id
     WHERE s.thread_ts = '` + LedgerThread + `' AND s.by_thread AND ($1 = '' OR s.channel_id = $1)
)
SELECT coalesce(c.channel, l.channel), coalesce(l.seq, 0), 'setting_changed', coalesce(c.id::text, l.key),
       CASE WHEN l.seq IS NULL THEN 'a channel_settings row has no ledger event'
            WHEN c.id IS NULL THEN 'the channel_settings row of the event is missing'
            ELSE 'the channel_settings row differs from its ledger event' END
  FROM (SELECT id, team, channel, name, old_value, value, set_by, set_at FROM channel_settings WHERE $1 = '' OR channel = $1) c
  FULL JOIN (SELECT l.channel, l.seq, l.key, l.p FROM l WHERE l.type = 'setting_changed') l ON l.key = 'setting/' || c.id
 WHERE c.id IS NULL OR l.seq IS NULL OR l.p IS NULL
    OR c.channel <> l.channel OR c.team IS DISTINCT FROM l.p->>'team' OR c.name IS DISTINCT FROM l.p->>'name'
    OR c.old_value IS DISTINCT FROM l.p->>'old' OR c.value IS DISTINCT FROM l.p->>'new'
    OR c.set_by IS DISTINCT FROM l.p->>'by' OR c.set_at IS DISTINCT FROM (l.p->>'at')::timestamptz
UNION ALL
SELECT coalesce(m.channel, l.channel), coalesce(l.seq, 0), 'note_added', coalesce(m.id::text, l.key),
       CASE WHEN l.seq IS NULL THEN 'a channel_memory row has no ledger event'
            WHEN m.id IS NULL THEN 'the channel_memory row of the event is missing'
            ELSE 'the channel_memory row differs from its ledger event' END
  FROM (SELECT id, team, channel, text, by_kind, by_id, session_id, thread_ts, call_id, created_at FROM channel_memory WHERE $1 = '' OR channel = $1) m
  FULL JOIN (SELECT l.channel, l.seq, l.key, l.p FROM l WHERE l.type = 'note_added') l ON l.key = 'note/' || m.id
 WHERE m.id IS NULL OR l.seq IS NULL OR m.channel <> l.channel
    OR (l.p IS NULL AND m.text IS NOT NULL)
    OR (l.p IS NOT NULL AND (m.team IS DISTINCT FROM l.p->>'team' OR m.text IS DISTINCT FROM l.p->>'text'
        OR m.by_kind IS DISTINCT FROM l.p->>'by_kind' OR m.by_id IS DISTINCT FROM l.p->>'by'
        OR m.session_id::text IS DISTINCT FROM l.p->>'session' OR m.thread_ts IS DISTINCT FROM coalesce(l.p->>'thread_ts', '')
        OR m.call_id IS DISTINCT FROM l.p->>'call_id' OR m.created_at IS DISTINCT FROM (l.p->>'at')::timestamptz))
UNION ALL
SELECT coalesce(f.channel, l.channel), coalesce(l.seq, 0), 'note_forgotten', coalesce(f.note_id::text, l.key),
       CASE WHEN l.seq IS NULL THEN 'a channel_memory_forgotten row has no ledger event'
            WHEN f.note_id IS NULL THEN 'the channel_memory_forgotten row of the event is missing'
            ELSE 'the channel_memory_forgotten row differs from its ledger event' END
  FROM (SELECT f.note_id, f.forgotten_by, f.forgotten_at, m.channel FROM channel_memory_forgotten f JOIN channel_memory m ON m.id = f.note_id
         WHERE $1 = '' OR m.channel = $1) f
  FULL JOIN (SELECT l.channel, l.seq, l.key, l.p FROM l WHERE l.type = 'note_forgotten') l ON l.key = 'forgot/' || f.note_id
 WHERE f.note_id IS NULL OR l.seq IS NULL OR l.p IS NULL OR f.channel <> l.channel
    OR f.forgotten_by IS DISTINCT FROM l.p->>'by' OR f.forgotten_at IS DISTINCT FROM (l.p->>'at')::timestamptz
UNION ALL
SELECT coalesce(r.channel, l.channel), coalesce(l.seq, 0), 'repo_set', coalesce(r.id::text, l.key),
       CASE WHEN l.seq IS NULL THEN 'a channel_repos row has no ledger event'
            WHEN r.id IS NULL THEN 'the channel_repos row of the event is missing'
            ELSE 'the channel_repos row differs from its ledger event' END
  FROM (SELECT id, team, channel, url, branch, set_by, set_at FROM channel_repos WHERE $1 = '' OR channel = $1) r
  FULL JOIN (SELECT l.channel, l.seq, l.key, l.p FROM l WHERE l.type = 'repo_set') l ON l.key = 'repo/' || r.id
 WHERE r.id IS NULL OR l.seq IS NULL OR l.p IS NULL OR r.channel <> l.channel
    OR r.team IS DISTINCT FROM l.p->>'team' OR r.url IS DISTINCT FROM l.p->>'url' OR r.branch IS DISTINCT FROM l.p->>'branch'
    OR r.set_by IS DISTINCT FROM l.p->>'by' OR r.set_at IS DISTINCT FROM (l.p->>'at')::timestamptz
UNION ALL
SELECT coalesce(b.channel, l.channel), coalesce(l.seq, 0), 'budget_raised', coalesce(b.id::text, l.key),
       CASE WHEN l.seq IS NULL THEN 'a budget_raises row has no ledger event'
            WHEN b.id IS NULL THEN 'the budget_raises row of the event is missing'
            ELSE 'the budget_raises row differs from its ledger event' END
  FROM (SELECT id, day, scope, subject, channel, amount, raised_by, at FROM budget_raises WHERE $1 = '' OR channel = $1) b
  FULL JOIN (SELECT l.channel, l.seq, l.key, l.p FROM l WHERE l.type = 'budget_raised') l ON l.key = 'budget/' || b.id
 WHERE b.id IS NULL OR l.seq IS NULL OR l.p IS NULL OR b.channel <> l.channel
    OR to_char(b.day, 'YYYY-MM-DD') IS DISTINCT FROM l.p->>'day' OR b.scope IS DISTINCT FROM l.p->>'scope'
    OR b.subject IS DISTINCT FROM l.p->>'subject' OR b.amount::text IS DISTINCT FROM l.p->>'amount'
    OR b.raised_by IS DISTINCT FROM l.p->>'by' OR b.at IS DISTINCT FROM (l.p->>'at')::timestamptz
UNION ALL
SELECT coalesce(sc.channel, l.channel), coalesce(l.seq, 0), 'schedule_added', coalesce(sc.id::text, l.key),
       CASE WHEN l.seq IS NULL THEN 'a schedules row has no ledger event'
            WHEN sc.id IS NULL THEN 'the schedules row of the event is missing'
            ELSE 'the schedules row differs from its ledger event' END
  FROM (SELECT id, team, channel, spec, prompt, added_by, added_at FROM schedules WHERE $1 = '' OR channel = $1) sc
  FULL JOIN (SELECT l.channel, l.seq, l.key, l.p FROM l WHERE l.type = 'schedule_added') l ON l.key = 'schedule/' || sc.id
 WHERE sc.id IS NULL OR l.seq IS NULL OR l.p IS NULL OR sc.channel <> l.channel
    OR sc.team IS DISTINCT FROM l.p->>'team' OR sc.spec IS DISTINCT FROM l.p->>'spec' OR sc.prompt IS DISTINCT FROM l.p->>'prompt'
    OR sc.added_by IS DISTINCT FROM l.p->>'by' OR sc.added_at IS DISTINCT FROM (l.p->>'at')::timestamptz
UNION ALL
SELECT coalesce(r.channel, l.channel), coalesce(l.seq, 0), 'schedule_removed', coalesce(r.schedule_id::text, l.key),
       CASE WHEN l.seq IS NULL THEN 'a schedule_removals row has no ledger event'
            WHEN r.schedule_id IS NULL THEN 'the schedule_removals row of the event is missing'
            ELSE 'the schedule_removals row differs from its ledger event' END
  FROM (SELECT r.schedule_id, r.removed_by, r.removed_at, r.reason, sc.channel
          FROM schedule_removals r JOIN schedules sc ON sc.id = r.schedule_id WHERE $1 = '' OR sc.channel = $1) r
  FULL JOIN (SELECT l.channel, l.seq, l.key, l.p FROM l WHERE l.type = 'schedule_removed') l ON l.key = 'unschedule/' || r.schedule_id
 WHERE r.schedule_id IS NULL OR l.seq IS NULL OR l.p IS NULL OR r.channel <> l.channel
    OR r.removed_by IS DISTINCT FROM l.p->>'by' OR r.reason IS DISTINCT FROM coalesce(l.p->>'reason', '')
    OR r.removed_at IS DISTINCT FROM (l.p->>'at')::timestamptz
UNION ALL
SELECT coalesce(t.channel, l.channel), coalesce(l.seq, 0), 'connector_connected', coalesce(t.server, l.key),
       CASE WHEN l.seq IS NULL THEN 'an mcp_tokens row has no ledger event'
            WHEN t.server IS NULL THEN 'the mcp_tokens row of the event is missing'
            ELSE 'the mcp_tokens row differs from its latest ledger event' END
  FROM (SELECT server, channel, connected_by, connected_at FROM mcp_tokens WHERE $1 = '' OR channel = $1) t
  FULL JOIN (SELECT DISTINCT ON (l.channel, l.p->>'server') l.channel, l.seq, l.key, l.p
               FROM l WHERE l.type = 'connector_connected' ORDER BY l.channel, l.p->>'server', l.seq DESC) l
    ON l.channel = t.channel AND l.p->>'server' = t.server
 WHERE t.server IS NULL OR l.seq IS NULL
    OR t.connected_by IS DISTINCT FROM l.p->>'by' OR t.connected_at IS DISTINCT FROM (l.p->>'at')::timestamptz
UNION ALL
SELECT coalesce(a.channel, l.channel), coalesce(l.seq, 0), coalesce(l.type, 'automation_' || a.action), coalesce(a.id::text, l.key),
       CASE WHEN l.seq IS NULL THEN 'an automation_pauses row has no ledger event'
            WHEN a.id IS NULL THEN 'the automation_pauses row of the event is missing'
            ELSE 'the automation_pauses row differs from its ledger event' END
  FROM (SELECT id, kind, name, action, channel, actor, reason, at FROM automation_pauses
         WHERE channel <> '' AND ($1 = '' OR channel = $1)) a
  FULL JOIN (SELECT l.channel, l.seq, l.type, l.key, l.p FROM l WHERE l.type IN ('automation_paused', 'automation_resumed')) l
    ON l.key = 'pause/' || a.id
 WHERE a.id IS NULL OR l.seq IS NULL OR l.p IS NULL OR a.channel <> l.channel OR l.type <> 'automation_' || a.action
    OR a.kind IS DISTINCT FROM l.p->>'kind' OR a.name IS DISTINCT FROM l.p->>'name' OR a.actor IS DISTINCT FROM l.p->>'by'
    OR a.reason IS DISTINCT FROM coalesce(l.p->>'reason', '') OR a.at IS DISTINCT FROM (l.p->>'at')::timestamptz
ORDER BY 1, 2, 3, 4`

// CheckLedgers checks the projections against the ledgers (channel "": every channel's):
// every row has its ledger event with the same fields, and every event its row. It returns
// what disagrees, by channel; err is only for failures to read. (The chains themselves are
// verified as every session's, by Verify.)
func (s *Store) CheckLedgers(ctx context.Context, channel string) ([]LedgerFinding, error) {
	return checkLedgers(ctx, s.pool, channel)
}

// checkLedgers is CheckLedgers on q (the pool, or a transaction that rebuilds projections).
func checkLedgers(ctx context.Context, q querier, channel string) ([]LedgerFinding, error) {
	rows, err := q.Query(ctx, sqlCheckLedgers, channel)
	if err != nil {
		return nil, fmt.Errorf("check the ledgers: %w", err)
	}
	fs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (LedgerFinding, error) {
		var f LedgerFinding
		var typ, id string
		err := row.Scan(&f.Channel, &f.Seq, &typ, &id, &f.Reason)
		f.Change = typ + " " + id
		return f, err
	})
	if err != nil {
		return nil, fmt.Errorf("check the ledgers: %w", err)
	}
	return fs, nil
}

// ChannelSeen is what the log knows of a channel: the team of its sessions, how many
// threads logbook stored in it (the gateway stores public channels' messages only) and when
// the newest began, and whether it has a ledger.
type ChannelSeen struct {
	Team       string
	Threads    int64
	LastThread time.Time // zero when Threads is 0
	Ledger     bool
}

// sqlChannelSeen is the channel's sessions summed up: (team of the oldest, threads — not its
// ledger, not eval records —, newest thread's start, has a ledger); a row of zeros when there
// are none.
const sqlChannelSeen = `SELECT coalesce((SELECT team_id FROM sessions WHERE channel_id = $1 ORDER BY created_at, id LIMIT 1), ''),
       count(*) FILTER (WHERE thread_ts <> '` + LedgerThread + `' AND kind = 'thread'),
       max(created_at) FILTER (WHERE thread_ts <> '` + LedgerThread + `' AND kind = 'thread'),
       count(*) FILTER (WHERE thread_ts = '` + LedgerThread + `') > 0
  FROM sessions WHERE channel_id = $1`

// ChannelSeen returns what the log knows of channel; a zero ChannelSeen when logbook never
// stored anything of it.
func (s *Store) ChannelSeen(ctx context.Context, channel string) (ChannelSeen, error) {
	var c ChannelSeen
	var last *time.Time
	if err := s.pool.QueryRow(ctx, sqlChannelSeen, channel).Scan(&c.Team, &c.Threads, &last, &c.Ledger); err != nil {
		return c, fmt.Errorf("read what is known of channel %s: %w", channel, err)
	}
	if last != nil {
		c.LastThread = *last
	}
	return c, nil
}
