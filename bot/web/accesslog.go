package web

import (
	"context"
	"fmt"
	"net/http"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/logbook/logbook/session"
)

// execer is the one method of a pgx pool (or transaction) the access log needs.
type execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// access is one access_log row (see migrations/00002_search.sql for the columns).
type access struct {
	action  string // list, view, download, search
	session session.ID
	format  string
	query   string
	results int
	status  int
}

const sqlRecordAccess = `
INSERT INTO access_log (who, via, auditor, action, session_id, format, query, results, status,
                        remote_addr, user_agent)
VALUES ($1, $2, $3, $4, $5, NULLIF($6, ''), NULLIF($7, ''), $8, $9, $10, $11)`

// record appends a to the access log. The page is written only after this succeeds: nothing
// is shown that is not recorded.
func record(ctx context.Context, db execer, r *http.Request, a access) error {
	id := identityFrom(ctx)
	var sess *session.ID
	if a.session != (session.ID{}) {
		sess = &a.session
	}
	if _, err := db.Exec(ctx, sqlRecordAccess, clean(id.Who, 320), id.Via, id.Auditor, a.action, sess, a.format,
		clean(a.query, 2000), a.results, a.status, clean(r.RemoteAddr, 100), clean(r.UserAgent(), 512)); err != nil {
		return fmt.Errorf("record %s by %s in the access log: %w", a.action, id.Who, err)
	}
	return nil
}

// clean makes s storable as PostgreSQL text (valid UTF-8, no NUL) and at most n bytes.
func clean(s string, n int) string {
	s = strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "\uFFFD")
	if len(s) > n {
		s = strings.ToValidUTF8(s[:n], "")
	}
	return s
}
