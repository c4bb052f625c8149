package session

import (
	"errors"
	"fmt"
)

// Sentinel errors. Callers use errors.Is. (sandbox and slackemu keep lists alike in shape:
// each package names the errors it returns.)
var (
	// ErrNotFound: no such session (or event).
	ErrNotFound = errors.New("not found")
	// ErrUnknownType: the event type is not one the log accepts.
	ErrUnknownType = errors.New("unknown event type")
	// ErrInvalidPayload: the payload is not a JSON object.
	ErrInvalidPayload = errors.New("invalid payload")
	// ErrInvalidEvent: a required field is empty or holds text PostgreSQL cannot store.
	ErrInvalidEvent = errors.New("invalid event")
	// ErrEmptySessionID: the zero session id.
	ErrEmptySessionID = errors.New("empty session id")
	// ErrFenced: the append carried a lease epoch that is no longer the session's current one.
	ErrFenced = errors.New("stale lease epoch")
	// ErrPurged: the payload was removed by retention.
	ErrPurged = errors.New("payload purged by retention")
	// ErrLeaseHeld: another owner holds an unexpired lease on the session.
	ErrLeaseHeld = errors.New("lease held by another owner")
	// ErrReadOnly: the server takes no writes (a standby, or a read-only session).
	ErrReadOnly = errors.New("database is read-only")
)

// ConflictError is returned by an append whose expected seq is not the session's head.
// Nothing was written. errors.Is(err, ErrConflict) also matches.
type ConflictError struct {
	Session  ID
	Expected int64
	Actual   int64
}

// ErrConflict matches every *ConflictError.
var ErrConflict = errors.New("expected seq conflict")

func (e *ConflictError) Error() string {
	return fmt.Sprintf("append to session %s: expected seq %d, head is %d", e.Session, e.Expected, e.Actual)
}

// Is makes errors.Is(err, ErrConflict) true.
func (e *ConflictError) Is(target error) bool { return target == ErrConflict }

// TooLargeError is returned when a payload is over the store's limit. Nothing was written.
type TooLargeError struct {
	Index int // position of the event in the batch
	Size  int // bytes of encoded JSON
	Limit int // bytes
}

func (e *TooLargeError) Error() string {
	return fmt.Sprintf("event %d payload is %d bytes, over the limit of %d bytes", e.Index, e.Size, e.Limit)
}
