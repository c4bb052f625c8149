package main

import (
	"context"
	"strings"
	"testing"

	"github.com/logbook/logbook/migrations/pgtest"
	"github.com/logbook/logbook/session"
)

// `logbook config` lists every channel's settings as the records say (the newest of each) and
// their history with who, when, old and new value, after the environment's defaults.
func TestConfigCommandListsEveryChannelsSettingsAndHistory(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.New(t)
	vars := map[string]string{"DATABASE_URL": dbURL, "LOGBOOK_MODEL": "anthropic:claude-default"}
	flat := func(s string) string { return strings.Join(strings.Fields(s), " ") } // tabwriter's columns
	if err, _, stdout, _ := runCLI(t, vars, "config"); err != nil || !strings.Contains(flat(stdout), `model "anthropic:claude-default" (LOGBOOK_MODEL)`) ||
		!strings.Contains(stdout, "No channel has settings of its own.") {
		t.Fatalf("empty: %v\n%s", err, stdout)
	}
	pool, err := session.Connect(context.Background(), dbURL, session.PoolOptions{Role: "logbook_app"})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	st := session.NewStore(pool, session.Options{})
	for _, c := range []session.ChannelSetting{
		{Team: "T1", Channel: "C0000001", Name: "model", New: "openai:gpt-x", Set: true, SetBy: "U0000001"},
		{Team: "T1", Channel: "C0000001", Name: "model", New: "anthropic:claude-y", Set: true, SetBy: "U0000002"},
		{Team: "T1", Channel: "C0000002", Name: "setup", New: "npm ci", Set: true, SetBy: "U0000001"},
		{Team: "T1", Channel: "C0000002", Name: "setup", SetBy: "U0000001"},
	} {
		if _, err := st.SetChannelSetting(context.Background(), c); err != nil {
			t.Fatal(err)
		}
	}
	err, _, stdout, _ := runCLI(t, vars, "config")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"Channel C0000001 (team T1):", `model "anthropic:claude-y" set by U0000002`,
		`U0000001 model default → "openai:gpt-x"`, `U0000002 model "openai:gpt-x" → "anthropic:claude-y"`,
		"Channel C0000002 (team T1):", `setup default set by U0000001`, `U0000001 setup "npm ci" → default`,
	} {
		if !strings.Contains(flat(stdout), want) {
			t.Errorf("missing %q in:\n%s", want, stdout)
		}
	}
	if err, _, stdout, _ := runCLI(t, vars, "config", "--channel", "C0000002"); err != nil || strings.Contains(stdout, "C0000001") || !strings.Contains(stdout, "npm ci") {
		t.Fatalf("--channel: %v\n%s", err, stdout)
	}
}
