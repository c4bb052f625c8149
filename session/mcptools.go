package session

import (
	"context"
	"crypto/sha256"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
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
	// The usual case, a list the channel has seen: one read, no lock, no transaction.
	known, err := readToolDescriptions(ctx, s.pool, channel, server)
	if err != nil {
		return nil, err
	}
	if diff := compareToolDescriptions(known, tools); len(diff.names) == 0 {
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
	// Read again under the lock: another session may have noted the change meanwhile.
	if known, err = readToolDescriptions(ctx, tx, channel, server); err != nil {
		return nil, err
	}
	diff := compareToolDescriptions(known, tools)
	if len(diff.names) == 0 {
		return nil, nil // nothing new: the lock is released with the rollback
	}
	if _, err := tx.Exec(ctx, sqlNoteToolDescriptions, channel, server, diff.names, diff.sums, diff.descriptions, at); err != nil {
		return nil, fmt.Errorf("note tool descriptions of MCP server %s in %s: %w", server, channel, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, fmt.Errorf("note tool descriptions of MCP server %s in %s: %w", server, channel, err)
	}
	return diff.changes, nil
}

// seenTool is a tool's description as the channel's sessions last listed it.
type seenTool struct {
	sum         []byte
	description string
	first       time.Time
}

// readToolDescriptions is what the channel's sessions last listed of server's tools, by tool.
func readToolDescriptions(ctx context.Context, q Querier, channel, server string) (map[string]seenTool, error) {
	known := map[string]seenTool{}
	rows, err := q.Query(ctx, sqlToolDescriptions, channel, server)
	if err != nil {
		return nil, fmt.Errorf("read tool descriptions of MCP server %s in %s: %w", server, channel, err)
	}
	var tool string
	var v seenTool
	if _, err := pgx.ForEachRow(rows, []any{&tool, &v.sum, &v.description, &v.first}, func() error {
		known[tool] = v
		return nil
	}); err != nil {
		return nil, fmt.Errorf("read tool descriptions of MCP server %s in %s: %w", server, channel, err)
	}
	return known, nil
}

// toolDiff is what a listing has that the channel has not seen: the rows to write, and the
// changed descriptions among them.
type toolDiff struct {
	names, descriptions []string
	sums                [][]byte
	changes             []ToolDescriptionChange
}

func compareToolDescriptions(known map[string]seenTool, tools []ToolDescription) toolDiff {
	var d toolDiff
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
			d.changes = append(d.changes, ToolDescriptionChange{Tool: t.Tool, Before: old.description, After: t.Description,
				BeforeSHA256: old.sum, AfterSHA256: sum[:], FirstSeen: old.first})
		}
		d.names, d.sums, d.descriptions = append(d.names, t.Tool), append(d.sums, sum[:]), append(d.descriptions, t.Description)
	}
	return d
}
