package checkout_test

import (
	"context"
	"encoding/json"
	"io/fs"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"go.uber.org/goleak"

	"github.com/logbook/logbook/bot/brain"
	"github.com/logbook/logbook/bot/checkout"
	"github.com/logbook/logbook/bot/part"
	"github.com/logbook/logbook/sandbox"
	"github.com/logbook/logbook/session"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// files is a workspace of files by path; only ReadFile is called.
type files struct {
	sandbox.Sandbox
	m map[string][]byte
}

func (f files) ReadFile(_ context.Context, p string) ([]byte, error) {
	if d, ok := f.m[p]; ok {
		return d, nil
	}
	return nil, fs.ErrNotExist
}

// AGENTS.md is read before CLAUDE.md; a file that is not UTF-8 is not an instruction file;
// a long one is cut at the limit on a rune boundary and says so; the hash is the whole file's.
func TestReadInstructions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r, err := checkout.Read(ctx, files{m: map[string][]byte{"AGENTS.md": []byte("use make"), "CLAUDE.md": []byte("no")}})
	if err != nil || r.Path != "AGENTS.md" || r.Text != "use make" || r.Cut || len(r.Hash) != 64 {
		t.Fatalf("Read = %+v, %v", r, err)
	}
	r, _ = checkout.Read(ctx, files{m: map[string][]byte{"AGENTS.md": {0xff, 0xfe}, "CLAUDE.md": []byte("claude")}})
	if r.Path != "CLAUDE.md" {
		t.Fatalf("a binary AGENTS.md was taken: %+v", r)
	}
	long := strings.Repeat("é", checkout.MaxRepoInstructions) // two bytes a rune
	r, _ = checkout.Read(ctx, files{m: map[string][]byte{"AGENTS.md": []byte(long)}})
	if !r.Cut || len(r.Text) > checkout.MaxRepoInstructions || !utf8.ValidString(r.Text) || r.Size != len(long) {
		t.Fatalf("long file: cut %v, %d bytes, valid %v, size %d", r.Cut, len(r.Text), utf8.ValidString(r.Text), r.Size)
	}
	r, _ = checkout.Read(ctx, files{m: map[string][]byte{}})
	if r.Path != "" {
		t.Fatalf("no file: %+v", r)
	}
}

// The directories of the files the agent read, wrote or attached, newest first, each once;
// other tools' paths are not the agent's files.
func TestTouchedDirs(t *testing.T) {
	t.Parallel()
	call := func(seq int64, name, path string) session.Event {
		in, _ := json.Marshal(map[string]string{"path": path})
		p, _ := json.Marshal(session.ToolCall{CallID: "c", Name: name, Input: in})
		return session.Event{Seq: seq, Type: session.TypeToolCall, Payload: p}
	}
	evs := []session.Event{call(1, brain.ToolReadFile, "svc/api/main.go"), call(2, "run_command", "ignored/x"),
		call(3, brain.ToolWriteFile, "/workspace/web/app.ts"), call(4, "attach_file", "svc/api/out.txt")}
	if got, want := checkout.TouchedDirs(evs), []string{"svc/api", "svc", "web"}; !slices.Equal(got, want) {
		t.Fatalf("TouchedDirs = %v, want %v", got, want)
	}
}

// workspace is a Workspace that answers as told.
type workspace struct {
	part.Hands
	note   string
	instr  checkout.Instructions
	nested []checkout.Instructions
}

func (w workspace) Ready(context.Context) (string, error) { return w.note, nil }
func (w workspace) Instructions(context.Context) (checkout.Instructions, error) {
	return w.instr, nil
}
func (w workspace) NestedInstructions(context.Context, []session.Event) []checkout.Instructions {
	return w.nested
}

type log struct{ part.Log }

func (log) Snapshot() []session.Event { return nil }

// The part says a failed setup under the reply, gives the system prompt the instruction
// files, and records their paths and hashes; without a sandbox it offers nothing.
func TestPartOffersInstructionsAndSetup(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w := workspace{note: "Setup `npm ci` failed", instr: checkout.Instructions{RepoInstructions: brain.RepoInstructions{Path: "AGENTS.md", Text: "use make"}, Hash: "h1"},
		nested: []checkout.Instructions{{RepoInstructions: brain.RepoInstructions{Path: "svc/AGENTS.md", Text: "svc rules"}, Hash: "h2"}}}
	o, err := checkout.Part().Offer(ctx, part.Scope{Hands: w, Log: log{}})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(o.Notes, []string{w.note}) || o.Guidance.Repo.Text != "use make" || len(o.Guidance.Nested) != 1 {
		t.Fatalf("offer = %+v", o)
	}
	var rec session.TurnSettings
	o.Settings(&rec)
	if rec.RepoInstructions != "AGENTS.md" || rec.RepoInstructionsHash != "h1" || !slices.Equal(rec.NestedInstructions, []string{"svc/AGENTS.md@h2"}) {
		t.Fatalf("turn_settings = %+v", rec)
	}
	o, err = checkout.Part().Offer(ctx, part.Scope{Log: log{}})
	if err != nil || o.Settings != nil || len(o.Notes) > 0 || o.Guidance.Repo.Path != "" {
		t.Fatalf("without a sandbox: %+v, %v", o, err)
	}
}
