package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/logbook/logbook/session"
)

// checkMigrated fails when the database lacks the tables of the newest migrations (the log's,
// asked of the store, and those of search and audit), saying what fixes it. serve, search,
// transcript, takeover, handback and every audit command check it first, so a database that
// was never migrated, or was migrated by an older binary, gets this line rather than a raw
// SQL error.
func checkMigrated(ctx context.Context, store *session.Store) error {
	missing, err := store.MissingTables(ctx, "search_docs", "audit_access", "web_sessions")
	if err != nil {
		return fmt.Errorf("check the database schema: %w", err)
	}
	if len(missing) > 0 {
		return fmt.Errorf("the database schema is missing or older than this binary (no %s): run 'logbook migrate up' with a role that owns the schema",
			strings.Join(missing, ", "))
	}
	return nil
}
