package session

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// MCPConnect is an OAuth connect of a remote MCP server begun on the web pages and not yet
// finished (migrations/00120), under the hash of its state. Sealed is the caller's (the PKCE
// verifier and endpoints, sealed by bot/connectors): this package never sees the verifier.
type MCPConnect struct {
	StateHash       []byte
	Server, Channel string
	Who             string
	Sealed          []byte
	Expires         time.Time
}

const sqlPutMCPConnect = `
WITH swept AS (DELETE FROM mcp_connects WHERE expires_at < $7)
INSERT INTO mcp_connects (state_hash, server, channel, who, sealed, expires_at) VALUES ($1, $2, $3, $4, $5, $6)`

// PutMCPConnect stores a pending connect, and sweeps those expired by now. Errors:
// ErrInvalidEvent when a field is empty.
func (s *Store) PutMCPConnect(ctx context.Context, c MCPConnect, now time.Time) error {
	if len(c.StateHash) == 0 || c.Server == "" || c.Channel == "" || c.Who == "" || len(c.Sealed) == 0 || c.Expires.IsZero() {
		return fmt.Errorf("put MCP connect: %w: state, server, channel, who, sealed and expiry are required", ErrInvalidEvent)
	}
	if _, err := s.pool.Exec(ctx, sqlPutMCPConnect, c.StateHash, c.Server, c.Channel, c.Who, c.Sealed, c.Expires, now); err != nil {
		return fmt.Errorf("put MCP connect of %s for %s: %w", c.Server, c.Channel, err)
	}
	return nil
}

const sqlTakeMCPConnect = `
DELETE FROM mcp_connects WHERE state_hash = $1 AND who = $2
RETURNING server, channel, sealed, expires_at`

// TakeMCPConnect removes and returns the pending connect of stateHash begun by who: once,
// on any replica. ErrNotFound when there is none (never begun, taken already, begun by
// someone else) or it expired by now (an expired one is removed all the same).
func (s *Store) TakeMCPConnect(ctx context.Context, stateHash []byte, who string, now time.Time) (MCPConnect, error) {
	c := MCPConnect{StateHash: stateHash, Who: who}
	err := s.pool.QueryRow(ctx, sqlTakeMCPConnect, stateHash, who).Scan(&c.Server, &c.Channel, &c.Sealed, &c.Expires)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return MCPConnect{}, fmt.Errorf("MCP connect: %w", ErrNotFound)
	case err != nil:
		return MCPConnect{}, fmt.Errorf("take MCP connect: %w", err)
	case !now.Before(c.Expires):
		return MCPConnect{}, fmt.Errorf("MCP connect of %s for %s expired at %s: %w", c.Server, c.Channel, c.Expires.UTC().Format(time.RFC3339), ErrNotFound)
	}
	return c, nil
}
