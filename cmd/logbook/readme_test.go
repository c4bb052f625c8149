package main

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/logbook/logbook/migrations/pgtest"
	"github.com/logbook/logbook/session"
)

// docsTestMarker precedes each fenced block of README.md whose every command is run by
// TestREADMECommandsRun: commands safe against any database (they read, or only print).
const docsTestMarker = "<!-- docs-test: run every command of the next block -->"

// readmeCommands is the commands of README's marked blocks, one per line, comments and blank
// lines left out.
func readmeCommands(t *testing.T, readme string) []string {
	t.Helper()
	var cmds []string
	for _, part := range strings.Split(readme, docsTestMarker)[1:] {
		block, ok := strings.CutPrefix(strings.TrimLeft(part, "\n"), "```sh\n")
		end := strings.Index(block, "\n```")
		if !ok || end < 0 {
			t.Fatalf("README.md: %q is not followed by a ```sh block", docsTestMarker)
		}
		for _, line := range strings.Split(block[:end], "\n") {
			if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
				cmds = append(cmds, line)
			}
		}
	}
	return cmds
}

// shellWords splits a command line as sh does for the plain words and "double-quoted" or
// 'single-quoted' words README uses; it reports false for anything else (pipes, $, ...).
func shellWords(line string) ([]string, bool) {
	var words []string
	var cur strings.Builder
	inWord := false
	var quote rune
	for _, r := range line {
		switch {
		case quote != 0 && r == quote:
			quote = 0
		case quote != 0:
			cur.WriteRune(r)
		case r == '"' || r == '\'':
			quote, inWord = r, true
		case r == ' ' || r == '\t':
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		case strings.ContainsRune("|&;<>()$`\\*?", r):
			return nil, false
		default:
			cur.WriteRune(r)
			inWord = true
		}
	}
	if quote != 0 {
		return nil, false
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words, true
}

// Every command of README's marked blocks runs, with the built binary, against a fresh
// database holding the thread README names, and succeeds: a newcomer copying them gets what
// README says, not an error.
func TestREADMECommandsRun(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	cmds := readmeCommands(t, string(b))
	// The block covers the read-only CLIs; a README that lost them fails here, not silently.
	for _, want := range []string{"logbook migrate status", "logbook search ", "logbook transcript ", "logbook audit verify", "logbook serve --help",
		"logbook replay ", "logbook eval ", "logbook config show ", "logbook config apply -f docs/channels.yaml --dry-run"} {
		if !strings.Contains(strings.Join(cmds, "\n")+"\n", want) {
			t.Errorf("README's docs-test block lacks %q (has %q)", want, cmds)
		}
	}
	dbURL := pgtest.New(t)
	seedREADMEThread(t, dbURL)
	home := t.TempDir()
	for _, line := range cmds {
		words, ok := shellWords(line)
		if !ok || len(words) < 2 || words[0] != "logbook" {
			t.Errorf("README command %q: not a plain logbook command this test can run", line)
			continue
		}
		cmd := exec.Command(binary, words[1:]...)
		cmd.Dir = "../.." // the repository's root, where README's reader runs them
		cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + home, "XDG_CACHE_HOME=" + home,
			"DATABASE_URL=" + dbURL, "LOGBOOK_AUDIT_OPERATOR=readme-test"}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Errorf("README command %q failed (%v):\n%s", line, err, out)
			continue
		}
		if strings.HasPrefix(line, "logbook search") && !strings.Contains(string(out), "deploy") {
			t.Errorf("README command %q found nothing:\n%s", line, out)
		}
		if strings.HasPrefix(line, "logbook transcript") && !strings.Contains(string(out), "the deploy timed out at the migration step") {
			t.Errorf("README command %q does not show the thread:\n%s", line, out)
		}
		if strings.HasPrefix(line, "logbook replay") && !strings.Contains(string(out), "identical through seq 1") {
			t.Errorf("README command %q does not say the thread replays identically:\n%s", line, out)
		}
		if strings.HasPrefix(line, "logbook config show") && !strings.Contains(string(out), "Channel C0000001 (team T0000001)") {
			t.Errorf("README command %q does not show the channel:\n%s", line, out)
		}
		if strings.HasPrefix(line, "logbook fork") && !strings.Contains(string(out), "dry run: nothing was posted or recorded") {
			t.Errorf("README command %q does not say what it would do:\n%s", line, out)
		}
		if strings.HasPrefix(line, "logbook eval") && !strings.Contains(string(out), "dry run: no model was called and nothing was recorded") {
			t.Errorf("README command %q does not say what it would do:\n%s", line, out)
		}
		if strings.HasPrefix(line, "logbook config apply") && !strings.Contains(string(out), "dry run: nothing written") {
			t.Errorf("README command %q prints no diff:\n%s", line, out)
		}
	}
}

// seedREADMEThread logs the thread README's commands name.
func seedREADMEThread(t *testing.T, dbURL string) {
	t.Helper()
	ctx := context.Background()
	pool, err := session.Connect(ctx, dbURL, session.PoolOptions{Role: "logbook_app"})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	store := session.NewStore(pool, session.Options{})
	s, err := store.Open(ctx, session.ThreadKey{Team: "T0000001", Channel: "C0000001", ThreadTS: "1700000000.000100"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Append(ctx, s.ID, session.NewEvent{Type: session.TypeUserMessage, Actor: session.Actor{Kind: session.ActorUser, ID: "U0000001"},
		Payload: session.UserMessage{Team: "T0000001", Channel: "C0000001", ThreadTS: s.Key.ThreadTS, TS: s.Key.ThreadTS,
			User: "U0000001", UserName: "ada", Text: "the deploy timed out at the migration step"}}); err != nil {
		t.Fatal(err)
	}
}
