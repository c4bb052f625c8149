package main

import (
	"context"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/logbook/logbook/bot/slackemu"
	"github.com/logbook/logbook/migrations/pgtest"
	"github.com/logbook/logbook/session"
)

// configStore is a store over dbURL with a thread stored in C0000001 (team T1): a channel
// logbook knows, public when it was seen.
func configStore(t *testing.T, dbURL string) *session.Store {
	t.Helper()
	ctx := context.Background()
	pool, err := session.Connect(ctx, dbURL, session.PoolOptions{Role: "logbook_app"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	st := session.NewStore(pool, session.Options{})
	if _, err := st.Open(ctx, session.ThreadKey{Team: "T1", Channel: "C0000001", ThreadTS: "1700000000.000100"}); err != nil {
		t.Fatal(err)
	}
	return st
}

// configFile writes a settings file and returns its path.
func configFile(t *testing.T, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "channels.yaml")
	if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// flatten is tabwriter's columns as single spaces.
func flatten(s string) string { return strings.Join(strings.Fields(s), " ") }

// `logbook config show` gives each setting's value and its source: the channel's ledger (who,
// when, through what, the seq of its event), the environment variable, or the default (a
// reset named), and the ledger's head.
func TestConfigShowSaysEachSettingsSourceAndTheLedgerHead(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbURL := pgtest.New(t)
	st := configStore(t, dbURL)
	vars := map[string]string{"DATABASE_URL": dbURL, "LOGBOOK_MODEL": "offline", "LOGBOOK_SETUP_COMMAND": "npm ci"}
	if err, _, out, stderr := runCLI(t, vars, "config", "show", "C0000001"); err != nil ||
		!strings.Contains(out, "Ledger: none yet") || !strings.Contains(flatten(out), `model "offline" environment: LOGBOOK_MODEL`) {
		t.Fatalf("before any change: %v\n%s%s", err, out, stderr)
	}
	var last session.ChannelSetting
	for _, c := range []session.ChannelSetting{
		{Name: "instructions", New: "Answer in French.", Set: true, SetBy: "U0000001"},
		{Name: "thread_replies", New: "all", Set: true, SetBy: "U0000002"},
		{Name: "thread_replies", SetBy: "U0000002"},
	} {
		c.Team, c.Channel = "T1", "C0000001"
		var err error
		if last, err = st.SetChannelSetting(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	err, _, out, stderr := runCLI(t, vars, "config", "show", "C0000001")
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	for _, want := range []string{
		"Channel C0000001 (team T1)",
		"Ledger: seq 3, hash " + hex.EncodeToString(last.Ledger.Hash),
		`model "offline" environment: LOGBOOK_MODEL`,
		`instructions "Answer in French." ledger: U0000001 at `, "via slash_command, seq 1",
		`approvals (none) default`,
		`thread_replies "addressed" default; reset by U0000002 at `, "via slash_command, seq 3",
		`daily_budget (none) default`,
		`setup "npm ci" environment: LOGBOOK_SETUP_COMMAND`,
	} {
		if !strings.Contains(flatten(out), want) {
			t.Errorf("missing %q in:\n%s", want, out)
		}
	}
	if err, code, _, _ := runCLI(t, vars, "config", "show", "general"); err == nil || code != 2 {
		t.Errorf("a name that is not a channel id: %v (exit %d), want a usage error", err, code)
	}
}

// `logbook config apply --dry-run` prints the diff and writes nothing; apply writes one
// ledger event per change, the operator its actor and "file" its way, and audit verify passes;
// a second apply writes nothing.
func TestConfigApplyDryRunThenApplyThenNoChanges(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbURL := pgtest.New(t)
	st := configStore(t, dbURL)
	if _, err := st.SetChannelSetting(ctx, session.ChannelSetting{Team: "T1", Channel: "C0000001", Name: "setup", New: "make deps", Set: true, SetBy: "U0000001"}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.SetChannelSetting(ctx, session.ChannelSetting{Team: "T1", Channel: "C0000001", Name: "daily_budget", New: "20", Set: true, SetBy: "U0000001"}); err != nil {
		t.Fatal(err)
	}
	vars := map[string]string{"DATABASE_URL": dbURL, "LOGBOOK_MODEL": "offline", "LOGBOOK_AUDIT_OPERATOR": "ops-alice"}
	file := configFile(t, `channels:
  C0000001:
    model: offline
    instructions: "Answer in French."
    daily_budget: 20
    setup: default
`)
	ledgerLen := func() int {
		id, err := st.Ledger(ctx, "C0000001")
		if err != nil {
			t.Fatal(err)
		}
		evs, err := st.Events(ctx, id, session.Range{})
		if err != nil {
			t.Fatal(err)
		}
		return len(evs)
	}
	err, _, out, stderr := runCLI(t, vars, "config", "apply", "-f", file, "--dry-run")
	if err != nil {
		t.Fatalf("dry run: %v\n%s%s", err, out, stderr)
	}
	for _, want := range []string{"C0000001 (team T1):", `model: default → "offline"`, `instructions: default → "Answer in French."`,
		`setup: "make deps" → default`, "3 changes; dry run: nothing written"} {
		if !strings.Contains(out, want) {
			t.Errorf("dry run: missing %q in:\n%s", want, out)
		}
	}
	if strings.Contains(out, "daily_budget") {
		t.Errorf("dry run: daily_budget holds 20 already, yet:\n%s", out)
	}
	if n := ledgerLen(); n != 2 {
		t.Fatalf("the dry run wrote: the ledger has %d events, want the 2 it had", n)
	}

	err, _, out, stderr = runCLI(t, vars, "config", "apply", "-f", file)
	if err != nil || !strings.Contains(out, "3 changes written by ops-alice (LOGBOOK_AUDIT_OPERATOR), via file") {
		t.Fatalf("apply: %v\n%s%s", err, out, stderr)
	}
	id, err := st.Ledger(ctx, "C0000001")
	if err != nil {
		t.Fatal(err)
	}
	evs, err := st.Events(ctx, id, session.Range{From: 3})
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 3 {
		t.Fatalf("apply appended %d ledger events, want one per change (3)", len(evs))
	}
	for _, ev := range evs {
		var p session.SettingChanged
		if err := ev.Decode(&p); err != nil {
			t.Fatal(err)
		}
		if ev.Type != session.TypeSettingChanged || ev.Actor != (session.Actor{Kind: session.ActorSystem, ID: "ops-alice"}) || p.Via != session.ViaFile || p.By != "ops-alice" {
			t.Errorf("ledger event %d: %s by %+v via %q, want setting_changed by the operator (system ops-alice) via file", ev.Seq, ev.Type, ev.Actor, p.Via)
		}
	}
	if err, _, out, stderr := runCLI(t, vars, "config", "show", "C0000001"); err != nil ||
		!strings.Contains(flatten(out), `model "offline" ledger: ops-alice at `) || !strings.Contains(out, "via file, seq 3") {
		t.Errorf("show after apply: %v\n%s%s", err, out, stderr)
	}
	if err, _, out, stderr := runCLI(t, map[string]string{"DATABASE_URL": dbURL, "USER": "op"}, "audit", "verify"); err != nil || !strings.Contains(out, "1 channel ledgers match") {
		t.Fatalf("audit verify after apply: %v\n%s%s", err, out, stderr)
	}

	if err, _, out, stderr := runCLI(t, vars, "config", "apply", "-f", file); err != nil || strings.TrimSpace(out) != "no changes" {
		t.Fatalf("second apply: %v\n%s%s", err, out, stderr)
	}
	if n := ledgerLen(); n != 5 {
		t.Fatalf("the second apply wrote: the ledger has %d events, want 5", n)
	}
}

// A file with an unknown key, an unknown channel, a channel whose visibility logbook cannot
// tell, or a value /logbook config refuses is refused whole: a line naming each, exit 1,
// nothing written (not even its good settings).
func TestConfigApplyRefusesAndWritesNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbURL := pgtest.New(t)
	st := configStore(t, dbURL)
	// C0000002 has settings (a slash command there) but no thread: logbook never saw it public.
	if _, err := st.SetChannelSetting(ctx, session.ChannelSetting{Team: "T1", Channel: "C0000002", Name: "setup", New: "npm ci", Set: true, SetBy: "U0000001"}); err != nil {
		t.Fatal(err)
	}
	vars := map[string]string{"DATABASE_URL": dbURL, "LOGBOOK_MODEL": "offline", "USER": "ops-bob"}
	for _, c := range []struct {
		name, file string
		want       []string
	}{
		{"unknown key and bad value", `channels:
  C0000001:
    model: offline
    modle: offline
    daily_budget: lots
    thread_replies: sometimes
`, []string{`line 4: C0000001: unknown setting "modle"`, `line 5: C0000001: daily_budget: "lots" is not an amount per day`,
			"line 6: C0000001: thread_replies: "}},
		{"unknown top-level key", "channel:\n  C0000001:\n    model: offline\n", []string{`line 1: unknown key "channel"`}},
		{"unknown and unchecked channels", `channels:
  C0000001:
    model: offline
  C0000009:
    model: offline
  C0000002:
    setup: make
`, []string{"line 4: C0000009: unknown channel", "line 6: C0000002: visibility unknown"}},
		{"anthropic without its key", "channels:\n  C0000001:\n    model: anthropic:claude-x\n", []string{"line 3: C0000001: model: ", "ANTHROPIC_API_KEY is not set"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			file := configFile(t, c.file)
			for _, args := range [][]string{{"config", "apply", "-f", file, "--dry-run"}, {"config", "apply", "-f", file}} {
				err, code, out, stderr := runCLI(t, vars, args...)
				if err == nil || code != 1 || !strings.Contains(err.Error(), "nothing written") {
					t.Errorf("%q: %v (exit %d), want refused with exit 1\n%s%s", args, err, code, out, stderr)
				}
				for _, want := range c.want {
					if !strings.Contains(stderr, want) {
						t.Errorf("%q: missing %q in:\n%s", args, want, stderr)
					}
				}
				for _, line := range strings.Split(strings.TrimSpace(stderr), "\n") {
					if !strings.HasPrefix(line, file+": line ") {
						t.Errorf("%q: a refusal line that does not name the file and line: %q", args, line)
					}
				}
			}
			hist, err := st.ChannelSettingsHistory(ctx, "")
			if err != nil {
				t.Fatal(err)
			}
			if len(hist) != 1 {
				t.Errorf("a refused file wrote: %d settings records, want the 1 there was", len(hist))
			}
		})
	}
}

// With SLACK_BOT_TOKEN, Slack says which channels exist and are public: a private one and
// one Slack does not have are refused, a public one logbook never stored anything of is
// applied, in the bot's team (auth.test).
func TestConfigApplyAsksSlackWhichChannelsArePublic(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbURL := pgtest.New(t)
	st := configStore(t, dbURL)
	// The bot is in the private channel: Slack answers channel_not_found to one it is not in.
	emu := slackemu.MustStart(t, slackemu.Options{BotUserID: "UB000001", Channels: []slackemu.Channel{
		{ID: "C0000007", Name: "ops"}, {ID: "C0000008", Name: "secret", Private: true, Members: []string{"UB000001"}}}})
	vars := map[string]string{"DATABASE_URL": dbURL, "LOGBOOK_MODEL": "offline", "USER": "ops-carol",
		"SLACK_BOT_TOKEN": emu.BotToken(), "SLACK_API_URL": emu.APIURL()}
	file := configFile(t, "channels:\n  C0000008:\n    setup: make\n  C0000009:\n    setup: make\n")
	err, code, out, stderr := runCLI(t, vars, "config", "apply", "-f", file, "--dry-run")
	if err == nil || code != 1 || !strings.Contains(stderr, "line 2: C0000008: private channel") || !strings.Contains(stderr, "line 4: C0000009: unknown channel") {
		t.Fatalf("private and unknown channels: %v (exit %d)\n%s%s", err, code, out, stderr)
	}
	file = configFile(t, "channels:\n  C0000007:\n    setup: make\n")
	if err, _, out, stderr := runCLI(t, vars, "config", "apply", "-f", file); err != nil || !strings.Contains(out, "C0000007 (team T0000001):") {
		t.Fatalf("a public channel Slack has: %v\n%s%s", err, out, stderr)
	}
	recs, err := st.ChannelSettings(ctx, "T0000001", "C0000007")
	if err != nil || recs["setup"].New != "make" || recs["setup"].SetBy != "ops-carol" {
		t.Fatalf("C0000007's settings after apply: %+v, %v", recs, err)
	}
}
