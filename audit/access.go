package audit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// dbtx is what the package's queries need: a pool, a connection or a transaction.
type dbtx interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Sentinel errors. Callers use errors.Is.
var (
	// ErrInvalid: a request is missing something or holds a bad value.
	ErrInvalid = errors.New("invalid audit request")
	// ErrNotFound: no such hold (or object).
	ErrNotFound = errors.New("not found")
	// ErrTampered: an export, checkpoint or chain does not match what was recorded.
	ErrTampered = errors.New("verification failed")
)

// Who is the person or part of the system acting.
type Who struct {
	Name   string // e.g. an operator's login or "scheduler"
	System bool   // the scheduler or retention, not a person
	// Source says where Name came from, recorded as audit_access.who_source: "--as",
	// "LOGBOOK_AUDIT_OPERATOR", "USER" or "os-account" for a person; "" is "system" for a
	// System Who and unrecorded otherwise.
	Source string
}

func (w Who) source() string {
	if w.Source == "" && w.System {
		return "system"
	}
	return w.Source
}

func (w Who) kind() string {
	if w.System {
		return "system"
	}
	return "person"
}

// Access is one recorded read or change of audit data: who, what, when, which filters.
type Access struct {
	ID      uuid.UUID
	At      time.Time
	Who     Who
	DBUser  string // the database role that made the connection (session_user)
	Action  string // export, verify, verify-checkpoint, hold-add, hold-remove, purge
	Filters map[string]any
}

const sqlRecordAccess = `
INSERT INTO audit_access (id, who, who_kind, who_source, action, filters) VALUES ($1, $2, $3, $4, $5, $6)
RETURNING at, db_user`

// RecordAccess appends an access record. It is called before the action, so an action that
// fails later is still on record. Errors: ErrInvalid for an empty who or action.
func RecordAccess(ctx context.Context, db dbtx, who Who, action string, filters map[string]any) (Access, error) {
	if who.Name == "" || action == "" {
		return Access{}, fmt.Errorf("record access: %w: who and action are required", ErrInvalid)
	}
	id, err := uuid.NewV7()
	if err != nil {
		return Access{}, fmt.Errorf("record access: new id: %w", err)
	}
	if filters == nil {
		filters = map[string]any{}
	}
	b, err := json.Marshal(filters)
	if err != nil {
		return Access{}, fmt.Errorf("record %s access by %s: encode filters: %w", action, who.Name, err)
	}
	a := Access{ID: id, Who: who, Action: action, Filters: filters}
	if err := db.QueryRow(ctx, sqlRecordAccess, id, who.Name, who.kind(), who.source(), action, b).Scan(&a.At, &a.DBUser); err != nil {
		return Access{}, fmt.Errorf("record %s access by %s: %w", action, who.Name, err)
	}
	return a, nil
}
