package bot_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/logbook/logbook/bot/brain/fakeprovider"
	"github.com/logbook/logbook/bot/hands"
	"github.com/logbook/logbook/bot/slackemu"
	"github.com/logbook/logbook/sandbox"
	"github.com/logbook/logbook/sandbox/egress"
	"github.com/logbook/logbook/sandbox/gittest"
	"github.com/logbook/logbook/session"
)

func setupCommand(cmd string) func(context.Context, string, string) (string, error) {
	return func(context.Context, string, string) (string, error) { return cmd, nil }
}

func setupResults(t *testing.T, h *harness, id session.ID) []session.SetupResult {
	t.Helper()
	var out []session.SetupResult
	for _, e := range h.events(id, session.TypeSetupResult) {
		var r session.SetupResult
		if err := e.Decode(&r); err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
	return out
}

// The channel's setup runs in the new sandbox before the first model call, its output
// recorded; the next session on the same commit gets the workspace it left from the cache,
// without running it again.
func TestSetupRunsBeforeTheFirstModelCallAndIsCachedPerCommit(t *testing.T) {
	// Not parallel: it saves work at eviction (see repo_test.go's "Serial saves").
	base, commit := gittest.Serve(t, "repo.git", map[string]string{"README.md": "# api\n", ".gitignore": "deps/\n"})
	h, model := modelHarness(t, harnessOptions{repo: &sandbox.RepoSpec{URL: base + "/repo.git", Branch: "main"},
		setup: hands.SetupConfig{Command: setupCommand(`mkdir -p deps && date +%s%N > deps/stamp && echo installed-ok`)}})
	model.Push(
		fakeprovider.Reply{ToolCalls: []fakeprovider.ToolCall{{ID: "toolu_1", Name: "run_command", Input: `{"command":"cat deps/stamp"}`}}},
		fakeprovider.Reply{Text: "one"},
		fakeprovider.Reply{ToolCalls: []fakeprovider.ToolCall{{ID: "toolu_2", Name: "run_command", Input: `{"command":"cat deps/stamp"}`}}},
		fakeprovider.Reply{Text: "two"})
	top := h.post(slackemu.Post{Channel: general, User: ada, Text: "<@" + botUser + "> one"})
	s1 := h.session(general, top.TS)
	h.answered(s1.ID)
	rs := setupResults(t, h, s1.ID)
	if len(rs) != 1 || rs[0].IsError || rs[0].Cached || rs[0].ExitCode != 0 || !strings.Contains(rs[0].Output, "installed-ok") || rs[0].Commit != commit || rs[0].CacheSHA == "" {
		t.Fatalf("first setup %+v", rs)
	}
	setupAt := h.events(s1.ID, session.TypeSetupResult)[0].CreatedAt
	if first := model.Calls()[0].At; first.Before(setupAt) {
		t.Fatalf("the first model call (%s) came before the setup's result (%s)", first, setupAt)
	}
	stamp := h.toolResult(s1.ID, "toolu_1").Content
	other := h.post(slackemu.Post{Channel: general, User: ada, Text: "<@" + botUser + "> two"})
	s2 := h.session(general, other.TS)
	h.answered(s2.ID)
	rs = setupResults(t, h, s2.ID)
	if len(rs) != 1 || !rs[0].Cached || rs[0].IsError {
		t.Fatalf("second setup %+v; want it from the cache", rs)
	}
	if again := h.toolResult(s2.ID, "toolu_2").Content; again != stamp || !strings.Contains(stamp, "1") {
		t.Fatalf("the cached workspace's stamp %q, the first %q: the setup ran again", again, stamp)
	}
}

// The cache keeps what the setup did to tracked files too: a tracked file it rewrote (a lock
// file) comes back rewritten, one it deleted stays deleted, beside the untracked files.
func TestSetupCacheKeepsChangesToTrackedFiles(t *testing.T) {
	// Not parallel: it saves work at eviction (see repo_test.go's "Serial saves").
	base, _ := gittest.Serve(t, "repo.git", map[string]string{"README.md": "# api\n", "lock.txt": "v1\n", "old.txt": "old\n", ".gitignore": "deps/\n"})
	h, model := modelHarness(t, harnessOptions{repo: &sandbox.RepoSpec{URL: base + "/repo.git", Branch: "main"},
		setup: hands.SetupConfig{Command: setupCommand(`mkdir -p deps && date +%s%N > deps/stamp && date +%s%N > lock.txt && rm old.txt`)}})
	look := `{"command":"cat lock.txt deps/stamp; ls old.txt 2>&1 || true"}`
	model.Push(
		fakeprovider.Reply{ToolCalls: []fakeprovider.ToolCall{{ID: "toolu_1", Name: "run_command", Input: look}}},
		fakeprovider.Reply{Text: "one"},
		fakeprovider.Reply{ToolCalls: []fakeprovider.ToolCall{{ID: "toolu_2", Name: "run_command", Input: look}}},
		fakeprovider.Reply{Text: "two"})
	top := h.post(slackemu.Post{Channel: general, User: ada, Text: "<@" + botUser + "> one"})
	s1 := h.session(general, top.TS)
	h.answered(s1.ID)
	if rs := setupResults(t, h, s1.ID); len(rs) != 1 || rs[0].IsError || rs[0].Cached || rs[0].CacheSHA == "" {
		t.Fatalf("first setup %+v", rs)
	}
	first := h.toolResult(s1.ID, "toolu_1").Content
	other := h.post(slackemu.Post{Channel: general, User: ada, Text: "<@" + botUser + "> two"})
	s2 := h.session(general, other.TS)
	h.answered(s2.ID)
	if rs := setupResults(t, h, s2.ID); len(rs) != 1 || !rs[0].Cached {
		t.Fatalf("second setup %+v; want it from the cache", rs)
	}
	again := h.toolResult(s2.ID, "toolu_2").Content
	if again != first || strings.Contains(first, "v1") || !strings.Contains(first, "No such file") {
		t.Fatalf("from the cache:\n%s\nafter the setup itself:\n%s", again, first)
	}
}

// A failed setup is said under the reply, and recorded with its output; the turn goes on.
func TestSetupFailureIsSaidInTheThread(t *testing.T) {
	t.Parallel()
	h, model := modelHarness(t, harnessOptions{setup: hands.SetupConfig{Command: setupCommand(`echo "no lockfile" >&2; exit 3`)}})
	model.Push(fakeprovider.Reply{Text: "answered anyway"})
	top := h.post(slackemu.Post{Channel: general, User: ada, Text: "<@" + botUser + "> hi"})
	reply := h.final(general, top.TS, 1)
	if !strings.Contains(reply, "answered anyway") || !strings.Contains(reply, "failed (exit 3)") || !strings.Contains(reply, "no lockfile") {
		t.Fatalf("reply %q; want the setup's failure said", reply)
	}
	s := h.session(general, top.TS)
	if rs := setupResults(t, h, s.ID); len(rs) != 1 || !rs[0].IsError || rs[0].ExitCode != 3 || !strings.Contains(rs[0].Output, "no lockfile") {
		t.Fatalf("setup_result %+v", rs)
	}
}

// The setup's egress (LOGBOOK_SETUP_EGRESS) is open while it runs and closed after: the
// registry it fetched from is refused to the agent's commands.
func TestSetupEgressWindowEndsWithTheSetup(t *testing.T) {
	t.Parallel()
	registry := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, "package-bytes") }))
	t.Cleanup(registry.Close)
	host := strings.TrimPrefix(registry.URL, "http://")
	allow, err := egress.ParseAllowlist(host)
	if err != nil {
		t.Fatal(err)
	}
	fetch := `curl -sS --noproxy '' -x "$HTTP_PROXY" http://` + host + `/pkg`
	h, model := modelHarness(t, harnessOptions{egress: &hands.Egress{},
		setup: hands.SetupConfig{Command: setupCommand(fetch), Egress: allow}})
	model.Push(
		fakeprovider.Reply{ToolCalls: []fakeprovider.ToolCall{{ID: "toolu_1", Name: "run_command", Input: fmt.Sprintf(`{"command":%q}`, fetch+" ; echo rc=$?")}}},
		fakeprovider.Reply{Text: "done"})
	top := h.post(slackemu.Post{Channel: general, User: ada, Text: "<@" + botUser + "> fetch"})
	s := h.session(general, top.TS)
	h.answered(s.ID)
	rs := setupResults(t, h, s.ID)
	if len(rs) != 1 || rs[0].IsError || !strings.Contains(rs[0].Output, "package-bytes") || rs[0].Egress == "" {
		t.Fatalf("setup %+v; want the registry reached", rs)
	}
	if r := h.toolResult(s.ID, "toolu_1").Content; strings.Contains(r, "package-bytes") {
		t.Fatalf("after the setup the agent's command reached the registry: %s", r)
	}
	_, port, _ := net.SplitHostPort(host)
	var allowed, refused int
	for _, e := range h.events(s.ID, session.TypeEgressConnection) {
		var c session.EgressConnection
		if e.Decode(&c) == nil && fmt.Sprint(c.Port) == port {
			if c.Allowed {
				allowed++
			} else {
				refused++
			}
		}
	}
	if allowed != 1 || refused != 1 {
		t.Fatalf("egress records: %d allowed, %d refused; want the setup's allowed and the command's refused", allowed, refused)
	}
}

// A turn that needs no model (mute, unmute: canned replies) is offered no part: it provisions
// no sandbox and runs no setup, and the setup's failure is said under the first reply the
// agent writes, not spent on a canned one.
func TestCannedRepliesRunNoSetup(t *testing.T) {
	t.Parallel()
	h, model := modelHarness(t, harnessOptions{setup: hands.SetupConfig{Command: setupCommand(`echo "no lockfile" >&2; exit 3`)}})
	model.Push(fakeprovider.Reply{Text: "answered anyway"})
	top := h.post(slackemu.Post{Channel: general, User: ada, Text: "<@" + botUser + "> mute"})
	h.replies(general, top.TS, 1)
	s := h.session(general, top.TS)
	h.answered(s.ID)
	h.acked(h.post(slackemu.Post{Channel: general, User: ada, ThreadTS: top.TS, Text: "<@" + botUser + "> unmute"}))
	h.replies(general, top.TS, 2)
	h.answered(s.ID)
	if evs := h.events(s.ID, session.TypeSandboxProvisioned, session.TypeSetupResult, session.TypeTurnSettings); len(evs) != 0 {
		t.Fatalf("canned replies provisioned or recorded %d events, first %s", len(evs), evs[0].Type)
	}
	if n := len(model.Calls()); n != 0 {
		t.Fatalf("%d model calls for canned replies", n)
	}
	h.acked(h.post(slackemu.Post{Channel: general, User: ada, ThreadTS: top.TS, Text: "<@" + botUser + "> hi"})) // stored before final waits
	reply := h.final(general, top.TS, 3)
	if !strings.Contains(reply, "answered anyway") || !strings.Contains(reply, "failed (exit 3)") {
		t.Fatalf("reply %q; want the setup's failure said under the agent's first reply", reply)
	}
	if rs := setupResults(t, h, s.ID); len(rs) != 1 {
		t.Fatalf("setup ran %d times", len(rs))
	}
}
