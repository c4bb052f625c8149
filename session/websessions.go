package session

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// WebSession is a browser's sign-in to the web pages (bot/web; migrations/00012): the row
// behind a sign-in cookie, found by the sha256 of the cookie's value. The value itself is
// never stored.
type WebSession struct {
	IDHash [32]byte // sha256 of the cookie's value
	// Who is the name of the bearer token signed in with, or (Via "oidc") the person the
	// OpenID Connect provider named.
	Who string
	// Via is how the session was opened: "" or "bearer_token" (the sign-in form), "oidc"
	// (migration 00080). Auditor is the role an OIDC sign-in was given.
	Via     string
	Auditor bool
	// TokenMAC ties the session to the token's secret (HMAC-SHA256 keyed by it), or an OIDC
	// session to the client's secret and role mapping: the caller honours the session only
	// while they are unchanged.
	TokenMAC  [32]byte
	CreatedAt time.Time
	ExpiresAt time.Time
}

// One statement: sessions expired by CreatedAt are deleted, then ws is inserted.
const sqlCreateWebSession = `
WITH expired AS (DELETE FROM web_sessions WHERE expires_at <= $4)
INSERT INTO web_sessions (id_hash, who, token_mac, created_at, expires_at, via, auditor)
VALUES ($1, $2, $3, $4, $5, $6, $7)`

// CreateWebSession records ws, and deletes the sessions that expired by ws.CreatedAt.
// Errors: ErrInvalidEvent for an empty Who or an ExpiresAt not after CreatedAt.
func (s *Store) CreateWebSession(ctx context.Context, ws WebSession) error {
	if ws.Who == "" || !ws.ExpiresAt.After(ws.CreatedAt) {
		return fmt.Errorf("create web session: %w: who and a lifetime are required", ErrInvalidEvent)
	}
	via := ws.Via
	if via == "" {
		via = "bearer_token"
	}
	if _, err := s.pool.Exec(ctx, sqlCreateWebSession, ws.IDHash[:], ws.Who, ws.TokenMAC[:], ws.CreatedAt, ws.ExpiresAt, via, ws.Auditor); err != nil {
		return fmt.Errorf("create web session for %s: %w", ws.Who, err)
	}
	return nil
}

const sqlWebSession = `SELECT who, token_mac, created_at, expires_at, via, auditor FROM web_sessions WHERE id_hash = $1 AND expires_at > $2`

// WebSession returns the session whose id hashes to idHash, if it has not expired by now;
// ErrNotFound when there is none (never created, ended, or expired).
func (s *Store) WebSession(ctx context.Context, idHash [32]byte, now time.Time) (WebSession, error) {
	ws := WebSession{IDHash: idHash}
	var mac []byte
	err := s.pool.QueryRow(ctx, sqlWebSession, idHash[:], now).Scan(&ws.Who, &mac, &ws.CreatedAt, &ws.ExpiresAt, &ws.Via, &ws.Auditor)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return ws, fmt.Errorf("web session: %w", ErrNotFound)
	case err != nil:
		return ws, fmt.Errorf("read web session: %w", err)
	}
	copy(ws.TokenMAC[:], mac)
	return ws, nil
}

const sqlEndWebSession = `DELETE FROM web_sessions WHERE id_hash = $1`

// EndWebSession deletes the session whose id hashes to idHash (a sign-out): its cookie no
// longer signs anyone in, on any replica. It reports whether there was one.
func (s *Store) EndWebSession(ctx context.Context, idHash [32]byte) (bool, error) {
	tag, err := s.pool.Exec(ctx, sqlEndWebSession, idHash[:])
	if err != nil {
		return false, fmt.Errorf("end web session: %w", err)
	}
	return tag.RowsAffected() > 0, nil
}
