package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/logbook/logbook/migrations/pgtest"
)

// A bad argument prints its error once (with the usage), not again at exit.
func TestErrorsPrintOnce(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.New(t)
	for _, tc := range []struct {
		args []string
		msg  string
	}{
		{[]string{"transcript", "not-a-session"}, `"not-a-session" is not a session id`},
		{[]string{"search", "  "}, "logbook search: "},
	} {
		var stdout, stderr bytes.Buffer
		getenv := func(k string) string {
			if k == "DATABASE_URL" {
				return dbURL
			}
			return ""
		}
		err := run(context.Background(), tc.args, getenv, strings.NewReader(""), &stdout, &stderr)
		if err == nil || exitCode(err) != 2 {
			t.Fatalf("logbook %q: %v (exit %d), want a usage error", tc.args, err, exitCode(err))
		}
		report(&stderr, err)
		if n := strings.Count(stderr.String(), strings.TrimPrefix(err.Error(), "logbook ")); n != 1 {
			t.Errorf("logbook %q printed its error %d times:\n%s", tc.args, n, stderr.String())
		}
		if !strings.Contains(stderr.String(), tc.msg) {
			t.Errorf("logbook %q: stderr lacks %q:\n%s", tc.args, tc.msg, stderr.String())
		}
	}
}
