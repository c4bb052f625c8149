package session

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// MCPToken is a remote MCP server's OAuth token for one channel (migrations/00045), sealed
// by the caller (bot/connectors): this package never sees the token itself.
type MCPToken struct {
	Server, Channel string
	Sealed          []byte
	ConnectedBy     string
	ConnectedAt     time.Time
}

const sqlConnectMCP = `
INSERT INTO mcp_tokens (server, channel, sealed, connected_by, connected_at) VALUES ($1, $2, $3, $4, $5)
ON CONFLICT (server, channel) DO UPDATE SET sealed = EXCLUDED.sealed, connected_by = EXCLUDED.connected_by,
    connected_at = EXCLUDED.connected_at, refreshed_at = NULL`

// ConnectMCP stores the token of a connect, replacing the server's token for the channel.
// Errors: ErrInvalidEvent when a name, the sealed token or who is empty.
func (s *Store) ConnectMCP(ctx context.Context, t MCPToken) error {
	if t.Server == "" || t.Channel == "" || len(t.Sealed) == 0 || t.ConnectedBy == "" {
		return fmt.Errorf("connect MCP server: %w: server, channel, token and who are required", ErrInvalidEvent)
	}
	if _, err := s.pool.Exec(ctx, sqlConnectMCP, t.Server, t.Channel, t.Sealed, t.ConnectedBy, t.ConnectedAt); err != nil {
		return fmt.Errorf("connect MCP server %s for %s: %w", t.Server, t.Channel, err)
	}
	return nil
}

const sqlRefreshMCP = `UPDATE mcp_tokens SET sealed = $3, refreshed_at = $4 WHERE server = $1 AND channel = $2`

// RefreshMCP replaces the sealed token of a connected server; ErrNotFound when it is not
// connected for the channel.
func (s *Store) RefreshMCP(ctx context.Context, server, channel string, sealed []byte, at time.Time) error {
	tag, err := s.pool.Exec(ctx, sqlRefreshMCP, server, channel, sealed, at)
	if err != nil {
		return fmt.Errorf("store refreshed token of MCP server %s for %s: %w", server, channel, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("MCP server %s for %s: %w", server, channel, ErrNotFound)
	}
	return nil
}

const sqlMCPToken = `SELECT sealed, connected_by, connected_at FROM mcp_tokens WHERE server = $1 AND channel = $2`

// MCPTokenOf returns the server's token for the channel; ErrNotFound when it was never
// connected there.
func (s *Store) MCPTokenOf(ctx context.Context, server, channel string) (MCPToken, error) {
	t := MCPToken{Server: server, Channel: channel}
	err := s.pool.QueryRow(ctx, sqlMCPToken, server, channel).Scan(&t.Sealed, &t.ConnectedBy, &t.ConnectedAt)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return t, fmt.Errorf("MCP server %s for %s: %w", server, channel, ErrNotFound)
	case err != nil:
		return t, fmt.Errorf("read token of MCP server %s for %s: %w", server, channel, err)
	}
	return t, nil
}
