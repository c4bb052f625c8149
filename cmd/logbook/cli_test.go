package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// runCLI runs the command line args without a database, as main would, and returns the
// error run gave, its exit status, and what was printed.
func runCLI(t *testing.T, vars map[string]string, args ...string) (err error, code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	err = run(context.Background(), args, func(k string) string { return vars[k] }, strings.NewReader(""), &out, &errOut)
	if err != nil {
		code = exitCode(err)
	}
	return err, code, out.String(), errOut.String()
}

// A mistyped subcommand or an extra argument fails with exit status 2 and one line that
// names the word and the nearest command (issue 29: cobra printed the group's help and
// exited 0, so a cron job running "logbook audit verfy" never verified anything).
func TestUnknownSubcommandsAndExtraArgumentsExit2(t *testing.T) {
	t.Parallel()
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"audit", "verfy"}, `unknown command "verfy" for "logbook audit"; did you mean "verify"?`},
		{[]string{"audit", "bogus"}, `unknown command "bogus" for "logbook audit"; its commands: checkpoint, export, hold, keygen, purge, runs, schedule, verify, verify-export`},
		{[]string{"migrate", "upp"}, `unknown command "upp" for "logbook migrate"; did you mean "up"?`},
		{[]string{"migrate", "down"}, `unknown command "down" for "logbook migrate"; its commands: status, up`},
		{[]string{"audit", "hold", "lst"}, `unknown command "lst" for "logbook audit hold"; did you mean "list"?`},
		{[]string{"serach", "x"}, `unknown command "serach" for "logbook"; did you mean "search"?`},
		{[]string{"audit", "keygen", "PREFIX"}, `audit keygen: takes no arguments (got "PREFIX"); usage: logbook audit keygen [--out <prefix>]`},
		{[]string{"audit", "runs", "extra"}, `audit runs: takes no arguments (got "extra")`},
		{[]string{"transcript", "a", "b", "c"}, `transcript: accepts between 1 and 2 arg(s), received 3`},
		{[]string{"search"}, `search: requires at least 1 arg(s), only received 0; usage: logbook search "<query>"`},
	}
	for _, c := range cases {
		err, code, stdout, _ := runCLI(t, nil, c.args...)
		if err == nil || code != 2 {
			t.Errorf("logbook %s: error %v, exit %d; want exit 2", strings.Join(c.args, " "), err, code)
			continue
		}
		if msg := err.Error(); !strings.Contains(msg, c.want) || strings.Contains(msg, "\n") {
			t.Errorf("logbook %s: %q; want one line containing %q", strings.Join(c.args, " "), msg, c.want)
		}
		if stdout != "" {
			t.Errorf("logbook %s printed help on stdout:\n%s", strings.Join(c.args, " "), stdout)
		}
	}
	// A group alone still shows its help, successfully.
	if err, _, stdout, _ := runCLI(t, nil, "audit"); err != nil || !strings.Contains(stdout, "Available Commands") {
		t.Errorf("logbook audit: %v, help %q", err, stdout)
	}
}
