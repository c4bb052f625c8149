package session

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Who asked for a note to be remembered (Note.ByKind).
const (
	NoteByUser  = "user"  // a person, with /logbook remember; By is their Slack user id
	NoteByAgent = "agent" // the agent, with its remember tool; By is the bot's id, Session the session it wrote from
)

// MaxNoteText is the longest note, in bytes.
const MaxNoteText = 2000

// Note is a note of a channel's memory. Text is "" once retention purged it (Purged).
// Forgotten is set when someone removed it (/logbook forget): a removed or purged note is
// never offered to the model again.
type Note struct {
	ID            int64
	Team, Channel string
	Text          string
	ByKind, By    string
	Session       ID // zero: not written from a session
	ThreadTS      string
	// CallID is the agent's remember call that asked for the note ("": a person's). A note is
	// added once per call: the same call again (replayed after a crash) returns the first.
	CallID      string
	At          time.Time
	Purged      bool
	Forgotten   bool
	ForgottenBy string
	ForgottenAt time.Time
	// Via is the path of the note (ViaSlash, ViaAgent, ViaCLI, ViaWeb, ViaFile); "" is
	// ViaAgent for the agent's notes, else ViaSlash.
	Via string
}

// ErrForgotten: the note was removed already.
var ErrForgotten = errors.New("note forgotten already")

const sqlAddNote = `INSERT INTO channel_memory (team, channel, text, by_kind, by_id, session_id, thread_ts, call_id)
VALUES ($1, $2, $3, $4, $5, $6, $7, NULLIF($8, ''))
ON CONFLICT (session_id, call_id) WHERE call_id IS NOT NULL DO NOTHING
RETURNING id, created_at, logbook_ledger($1, $2)`

const sqlNoteOfCall = `SELECT id, created_at, text FROM channel_memory WHERE session_id = $1 AND call_id = $2`

// AddNote appends a note to its channel's memory (a note_added event of the channel's ledger
// and, in the same transaction, its row) and returns it with its id and time. Errors:
// ErrInvalidEvent for an empty or too long text (MaxNoteText), a missing team, channel or who,
// an unknown Via.
func (s *Store) AddNote(ctx context.Context, n Note) (Note, error) {
	if n.Via == "" {
		n.Via = ViaSlash
		if n.ByKind == NoteByAgent {
			n.Via = ViaAgent
		}
	}
	if n.Team == "" || n.Channel == "" || n.By == "" || (n.ByKind != NoteByUser && n.ByKind != NoteByAgent) || !validVia(n.Via) {
		return n, fmt.Errorf("add note: %w: team, channel, who asked and a known way are required", ErrInvalidEvent)
	}
	if n.Text == "" || len(n.Text) > MaxNoteText {
		return n, fmt.Errorf("add note: %w: the text must have 1 to %d bytes", ErrInvalidEvent, MaxNoteText)
	}
	var sid *ID
	if n.Session != (ID{}) {
		sid = &n.Session
	}
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var ledger ID
		err := tx.QueryRow(ctx, sqlAddNote, n.Team, n.Channel, n.Text, n.ByKind, n.By, sid, n.ThreadTS, n.CallID).Scan(&n.ID, &n.At, &ledger)
		if errors.Is(err, pgx.ErrNoRows) { // this call's note is stored already, with its event: return it
			return tx.QueryRow(ctx, sqlNoteOfCall, sid, n.CallID).Scan(&n.ID, &n.At, &n.Text)
		}
		if err != nil {
			return err
		}
		_, err = s.appendLedger(ctx, tx, ledger, TypeNoteAdded, ledgerActor(n.By, n.Via), "note/"+strconv.FormatInt(n.ID, 10),
			NoteAdded{ID: n.ID, Team: n.Team, Text: n.Text, ByKind: n.ByKind, By: n.By, Session: sid, ThreadTS: n.ThreadTS,
				CallID: n.CallID, Via: n.Via, At: n.At})
		return err
	})
	if err != nil {
		return n, fmt.Errorf("add a note to %s: %w", n.Channel, err)
	}
	return n, nil
}

const sqlForgetNote = `INSERT INTO channel_memory_forgotten (note_id, forgotten_by)
SELECT id, $4 FROM channel_memory WHERE id = $3 AND team = $1 AND channel = $2
RETURNING forgotten_at, logbook_ledger($1, $2)`

// ForgetNote removes note id from the channel's memory, recording who did (a note_forgotten
// event of the channel's ledger and, in the same transaction, its row; by a person, with
// /logbook forget). Errors: ErrNotFound when the channel has no such note, ErrForgotten when it
// was removed already.
func (s *Store) ForgetNote(ctx context.Context, team, channel string, id int64, by string) (time.Time, error) {
	var at time.Time
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var ledger ID
		if err := tx.QueryRow(ctx, sqlForgetNote, team, channel, id, by).Scan(&at, &ledger); err != nil {
			return err
		}
		_, err := s.appendLedger(ctx, tx, ledger, TypeNoteForgotten, ledgerActor(by, ViaSlash), "forgot/"+strconv.FormatInt(id, 10),
			NoteForgotten{Note: id, By: by, Via: ViaSlash, At: at})
		return err
	})
	var pe *pgconn.PgError
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return at, fmt.Errorf("forget note %d of %s: %w", id, channel, ErrNotFound)
	case errors.As(err, &pe) && pe.Code == "23505":
		return at, fmt.Errorf("forget note %d of %s: %w", id, channel, ErrForgotten)
	case err != nil:
		return at, fmt.Errorf("forget note %d of %s: %w", id, channel, err)
	}
	return at, nil
}

const noteColumns = `m.id, m.team, m.channel, coalesce(m.text, ''), m.by_kind, m.by_id, m.session_id, m.thread_ts, m.created_at,
       m.text IS NULL, f.note_id IS NOT NULL, coalesce(f.forgotten_by, ''), coalesce(f.forgotten_at, 'epoch')`

const sqlNotes = `SELECT ` + noteColumns + `
FROM channel_memory m LEFT JOIN channel_memory_forgotten f ON f.note_id = m.id
WHERE ($1 = '' OR m.team = $1) AND ($2 = '' OR m.channel = $2) AND ($3 OR (m.text IS NOT NULL AND f.note_id IS NULL))
ORDER BY m.id DESC LIMIT $4`

// Notes returns the channel's notes, newest first, at most limit: only those that may be
// offered (neither forgotten nor purged), unless all is set. channel "": every channel of the
// team.
func (s *Store) Notes(ctx context.Context, team, channel string, all bool, limit int) ([]Note, error) {
	ns, err := collectNotes(s.pool.Query(ctx, sqlNotes, team, channel, all, limit))
	if err != nil {
		return nil, fmt.Errorf("read the memory of %s: %w", channel, err)
	}
	return ns, nil
}

const sqlNotesByID = `SELECT ` + noteColumns + `
FROM channel_memory m LEFT JOIN channel_memory_forgotten f ON f.note_id = m.id
WHERE m.team = $1 AND m.channel = $2 AND m.id = ANY($3)
ORDER BY m.id`

// NotesByID returns the notes of the channel's memory with these ids, forgotten and purged
// ones included (Forgotten, Purged say so), by id; an id the channel has no note of is left
// out. Transcripts read them to show the notes a turn was offered (TurnSettings.Memory).
func (s *Store) NotesByID(ctx context.Context, team, channel string, ids []int64) ([]Note, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	ns, err := collectNotes(s.pool.Query(ctx, sqlNotesByID, team, channel, ids))
	if err != nil {
		return nil, fmt.Errorf("read notes %v of %s: %w", ids, channel, err)
	}
	return ns, nil
}

// collectNotes scans the rows of a query over noteColumns.
func collectNotes(rows pgx.Rows, err error) ([]Note, error) {
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (Note, error) {
		var n Note
		var sid *ID
		err := row.Scan(&n.ID, &n.Team, &n.Channel, &n.Text, &n.ByKind, &n.By, &sid, &n.ThreadTS, &n.At,
			&n.Purged, &n.Forgotten, &n.ForgottenBy, &n.ForgottenAt)
		if sid != nil {
			n.Session = *sid
		}
		return n, err
	})
}
