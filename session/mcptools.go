package session

import (
	"context"
	"crypto/sha256"
	"fmt"
	"time"
)

// ToolDescription is what an MCP server's tool says it does: Tool is the server's own name of
// it, Full the description as the server sent it (its hash is kept), Description as the
// model gets it (bounded; kept to show what it said before).
type ToolDescription struct {
	Tool        string
	Full        string
	Description string
}

// ToolDescriptionChange is a tool whose description changed since the channel first saw it:
// Before as the model got it then, FirstSeen when, After as it gets it now.
type ToolDescriptionChange struct {
	Tool          string
	Before, After string
	BeforeSHA256  []byte
	AfterSHA256   []byte
	FirstSeen     time.Time
}

const (
	sqlLockToolDescriptions = `SELECT pg_advisory_xact_lock(hashtextextended('mcp_tool_descriptions:' || $1 || ':' || $2, 0))`
	sqlToolDescriptions     = `SELECT tool, sha256, description, first_seen FROM mcp_tool_descriptions WHERE channel = $1 AND server = $2`
	sqlNoteToolDescriptions = `INSERT INTO mcp_tool_descriptions AS d (channel, server, tool, sha256, description, first_seen)
SELECT $1, $2, t.tool, t.sha256, t.description, $6
  FROM unnest($3::text[], $4::bytea[], $5::text[]) AS t(tool, sha256, description)
ON CONFLICT (channel, server, tool) DO UPDATE
   SET sha256 = EXCLUDED.sha256, description = EXCLUDED.description, changed_at = EXCLUDED.first_seen`
)

// NoteToolDescriptions keeps what server's tools say they do in channel, as a session listed
// them at at, and returns the tools whose description changed since the channel's sessions
// last listed them (a tool never seen before is kept, not a change). Sessions of one channel
// and server note their lists one at a time (an advisory lock), so a change is returned to
// exactly one of them, whichever replica it runs on.
func (s *Store) NoteToolDescriptions(ctx context.Context, channel, server string, tools []ToolDescription, at time.Time) ([]ToolDescriptionChange, error) {
	if len(tools) == 0 {
		return nil, nil
	}
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("note tool descriptions of MCP server %s in %s: %w", server, channel, err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }() // after a commit: pgx.ErrTxClosed
	if _, err := tx.Exec(ctx, sqlLockToolDescriptions, channel, server); err != nil {
		return nil, fmt.Errorf("note tool descriptions of MCP server %s in %s: %w", server, channel, err)
	}
	type seen struct {
		sum         []byte
		description string
		first       time.Time
	}
	known := map[string]seen{}
	rows, err := tx.Query(ctx, sqlToolDescriptions, channel, server)
	if err != nil {
		return nil, fmt.Errorf("read tool descriptions of MCP server %s in %s: %w", server, channel, err)
	}
	for rows.Next() {
		var tool string
		var v seen
		if err := rows.Scan(&tool, &v.sum, &v.description, &v.first); err != nil {
			rows.Close()
			return nil, fmt.Errorf("read tool descriptions of MCP server %s in %s: %w", server, channel, err)
		}
		known[tool] = v
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read tool descriptions of MCP server %s in %s: %w", server, channel, err)
	}
	var changes []ToolDescriptionChange
	var names, descriptions []string
	var sums [][]byte
	listed := map[string]bool{}
	for _, t := range tools {
		if listed[t.Tool] {
			continue // a list naming a tool twice: the first is the one offered
		}
		listed[t.Tool] = true
		sum := sha256.Sum256([]byte(t.Full))
		old, ok := known[t.Tool]
		if ok && string(old.sum) == string(sum[:]) {
			continue
		}
		if ok {
			changes = append(changes, ToolDescriptionChange{Tool: t.Tool, Before: old.description, After: t.Description,
				BeforeSHA256: old.sum, AfterSHA256: sum[:], FirstSeen: old.first})
		}
		names, sums, descriptions = append(names, t.Tool), append(sums, sum[:]), append(descriptions, t.Description)
	}
	if len(names) == 0 {
		return nil, nil // nothing new: the lock is released with the rollback
	}
	if _, err := tx.Exec(ctx, sqlNoteToolDescriptions, channel, server, names, sums, descriptions, at); err != nil {
		return nil, fmt.Errorf("note tool descriptions of MCP server %s in %s: %w", server, channel, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, fmt.Errorf("note tool descriptions of MCP server %s in %s: %w", server, channel, err)
	}
	return changes, nil
}
