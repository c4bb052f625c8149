package session

import (
	"context"
	"errors"
	"fmt"
	"strconv"
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
    connected_at = EXCLUDED.connected_at, refreshed_at = NULL
RETURNING connected_at, logbook_ledger('', $2)`

// ConnectMCP stores the token of a connect, replacing the server's token for the channel, and
// appends a connector_connected event (server, who, when: never the token) to the channel's
// ledger in the same transaction. Errors: ErrInvalidEvent when a name, the sealed token or
// who is empty.
func (s *Store) ConnectMCP(ctx context.Context, t MCPToken) error {
	if t.Server == "" || t.Channel == "" || len(t.Sealed) == 0 || t.ConnectedBy == "" {
		return fmt.Errorf("connect MCP server: %w: server, channel, token and who are required", ErrInvalidEvent)
	}
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var at time.Time
		var ledger ID
		if err := tx.QueryRow(ctx, sqlConnectMCP, t.Server, t.Channel, t.Sealed, t.ConnectedBy, t.ConnectedAt).Scan(&at, &ledger); err != nil {
			return err
		}
		_, err := s.appendLedger(ctx, tx, ledger, TypeConnectorConnected, ledgerActor(t.ConnectedBy, ViaWeb),
			"connect/"+t.Server+"/"+strconv.FormatInt(at.UnixMicro(), 10),
			ConnectorConnected{Server: t.Server, By: t.ConnectedBy, Via: ViaWeb, At: at})
		return err
	})
	if err != nil {
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

const (
	sqlLockMCPToken = `SELECT sealed FROM mcp_tokens WHERE server = $1 AND channel = $2 FOR UPDATE`
	sqlSwapMCPToken = `UPDATE mcp_tokens SET sealed = $4, refreshed_at = $5 WHERE server = $1 AND channel = $2 AND sealed = $3`
)

// RefreshMCPLocked runs refresh on the server's stored token for the channel with the token's
// row locked (SELECT … FOR UPDATE), so that one refresh per (server, channel) runs at a time
// across every replica: the others wait for the row, then read what the winner stored. When
// refresh returns a sealed token it replaces the stored one by compare-and-swap (only if the
// stored token is still the one read), stamped refreshed at at; when it returns nil the
// stored token stands. It answers the sealed token stored when it returns.
//
// The transaction holds one pooled connection while refresh runs. That is the price of the
// lock living in PostgreSQL: the row lock is what makes a second replica wait instead of
// spending the same rotating refresh token, and a lock that outlived its connection (a lease
// row with an expiry) would let a slow winner and a new one overlap. So the caller must bound
// refresh (ctx's deadline is the transaction's), and should do in it only the token request.
//
// Errors: ErrNotFound when the server is not connected for the channel; ErrConflict when the
// stored token changed under the lock (a connect replaced it); refresh's error as it is.
func (s *Store) RefreshMCPLocked(ctx context.Context, server, channel string, at time.Time,
	refresh func(ctx context.Context, sealed []byte) ([]byte, error)) ([]byte, error) {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("lock token of MCP server %s for %s: %w", server, channel, err)
	}
	defer func() {
		// The rollback outlives ctx's deadline, so a refresh that ran out of time gives the
		// connection back to the pool, with the lock released, instead of closing it.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = tx.Rollback(rctx) // after a commit: pgx.ErrTxClosed
	}()
	out, err := func() ([]byte, error) {
		var old []byte
		err := tx.QueryRow(ctx, sqlLockMCPToken, server, channel).Scan(&old)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			return nil, fmt.Errorf("MCP server %s for %s: %w", server, channel, ErrNotFound)
		case err != nil:
			return nil, fmt.Errorf("lock token of MCP server %s for %s: %w", server, channel, err)
		}
		fresh, err := refresh(ctx, old)
		if err != nil || fresh == nil {
			return old, err
		}
		tag, err := tx.Exec(ctx, sqlSwapMCPToken, server, channel, old, fresh, at)
		if err != nil {
			return nil, fmt.Errorf("store refreshed token of MCP server %s for %s: %w", server, channel, err)
		}
		if tag.RowsAffected() == 0 {
			return nil, fmt.Errorf("store refreshed token of MCP server %s for %s: the stored token changed: %w", server, channel, ErrConflict)
		}
		return fresh, nil
	}()
	if err != nil {
		return nil, err
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, fmt.Errorf("store refreshed token of MCP server %s for %s: %w", server, channel, err)
	}
	return out, nil
}
