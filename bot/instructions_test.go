package bot_test

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"

	"github.com/logbook/logbook/bot/brain/fakeprovider"
	"github.com/logbook/logbook/bot/slackemu"
	"github.com/logbook/logbook/sandbox"
	"github.com/logbook/logbook/sandbox/gittest"
	"github.com/logbook/logbook/session"
)

func sha(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// The repository's AGENTS.md is read at provisioning, before the first model call (path and
// hash in sandbox_provisioned), and put in the system prompt after logbook's rules as the
// repository's text; edited during the session, it is read again at the next turn (not in the
// middle of the turn that edited it), and the turn's record has the new hash. The instruction
// file of a directory the agent worked in (api/CLAUDE.md, for api/v1/handler.go) joins at the
// next turn.
func TestRepositoryInstructionsReadAtProvisioningAndReread(t *testing.T) {
	t.Parallel()
	const first, second = "Run `make check` before you answer.\n", "Always run the linter.\n"
	base, _ := gittest.Serve(t, "repo.git", map[string]string{"AGENTS.md": first, "CLAUDE.md": "not this one\n", "main.go": "package main\n",
		"api/v1/handler.go": "package v1\n", "api/CLAUDE.md": "Handlers return errors, never panic.\n"})
	h, model := modelHarness(t, harnessOptions{repo: &sandbox.RepoSpec{URL: base + "/repo.git", Branch: "main"}})
	model.Push(fakeprovider.Reply{ToolCalls: []fakeprovider.ToolCall{{ID: "toolu_w", Name: "write_file", Input: `{"path":"AGENTS.md","content":"` + strings.TrimSuffix(second, "\n") + `\n"}`},
		{ID: "toolu_r", Name: "read_file", Input: `{"path":"api/v1/handler.go"}`}}},
		fakeprovider.Reply{Text: "Updated the instructions."})
	top := h.post(slackemu.Post{Channel: general, User: ada, Text: "<@" + botUser + "> make the linter mandatory"})
	s := h.session(general, top.TS)
	h.turns(s.ID, 1)
	calls := model.Calls()
	for i, c := range calls[:2] {
		if !strings.Contains(c.System, "<repository_instructions path=\"AGENTS.md\">\n"+strings.TrimSpace(first)+"\n</repository_instructions>") ||
			strings.Contains(c.System, "not this one") || strings.Index(c.System, "Tools:") > strings.Index(c.System, "repository_instructions") ||
			strings.Contains(c.System, "never panic") {
			t.Fatalf("request %d of the first turn:\n%s", i, c.System)
		}
	}
	var p session.SandboxProvisioned
	if evs := h.events(s.ID, session.TypeSandboxProvisioned); len(evs) != 1 || evs[0].Decode(&p) != nil ||
		p.Instructions != "AGENTS.md" || p.InstructionsHash != sha(first) || p.InstructionsSize != len(first) {
		t.Fatalf("sandbox_provisioned: %+v", p)
	}

	model.Push(fakeprovider.Reply{Text: "I will run the linter."})
	h.post(slackemu.Post{Channel: general, User: ada, ThreadTS: top.TS, Text: "<@" + botUser + "> what are the rules?"})
	h.turns(s.ID, 2)
	last := model.Calls()[len(model.Calls())-1]
	if !strings.Contains(last.System, strings.TrimSpace(second)) || strings.Contains(last.System, "make check") ||
		!strings.Contains(last.System, "<repository_instructions path=\"api/CLAUDE.md\">\nHandlers return errors, never panic.\n</repository_instructions>") {
		t.Fatalf("the next turn's instructions:\n%s", last.System)
	}
	recs := h.turnSettings(s.ID)
	if len(recs) != 2 || recs[0].RepoInstructionsHash != sha(first) || recs[1].RepoInstructionsHash != sha(second) || recs[1].RepoInstructions != "AGENTS.md" ||
		len(recs[1].NestedInstructions) != 1 || recs[1].NestedInstructions[0] != "api/CLAUDE.md@"+sha("Handlers return errors, never panic.\n") {
		t.Fatalf("turn_settings: %+v", recs)
	}
}
