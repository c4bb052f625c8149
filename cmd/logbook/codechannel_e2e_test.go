package main

import (
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/logbook/logbook/bot/brain/fakeprovider"
	"github.com/logbook/logbook/bot/slackemu"
	"github.com/logbook/logbook/sandbox/gittest"
	"github.com/logbook/logbook/session"
)

// `logbook serve` in a channel an admin set to code_channel: the session reads the repository,
// Slack makes its code channel, and logbook is killed (SIGKILL) before it hears Slack's answer,
// so before it records the channel. The next process asks again with the same session_id,
// records the channel Slack made, and links it under the reply: one code channel, one record.
func TestE2ECodeChannelMadeOnceThroughAKill(t *testing.T) {
	t.Parallel()
	e := newE2E(t, slackemu.Options{})
	repo := gittest.ServeWith(t, gittest.Options{Path: "acme/api.git", Files: map[string]string{"README.md": "# api\n"}})
	e.model.Push(
		fakeprovider.Reply{ToolCalls: []fakeprovider.ToolCall{{ID: "toolu_r", Name: "read_file", Input: `{"path":"README.md"}`}}},
		fakeprovider.Reply{Text: "It is the api."},
		fakeprovider.Reply{Text: "The api"},
	)
	// Between serve and the emulator: the first agents.conversations.create goes through, its
	// answer never comes back.
	target, _ := url.Parse(e.emu.URL())
	rp := httputil.NewSingleHostReverseProxy(target)
	made := make(chan struct{})
	var once sync.Once
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		held := false
		if strings.HasSuffix(r.URL.Path, "/agents.conversations.create") {
			once.Do(func() { held = true })
		}
		if !held {
			rp.ServeHTTP(w, r)
			return
		}
		rp.ServeHTTP(httptest.NewRecorder(), r)
		close(made)
		<-r.Context().Done()
	}))
	defer proxy.Close()
	cfg := []string{"LOGBOOK_SANDBOX=process", "LOGBOOK_REPOS=" + general + "=acme/api@main", "LOGBOOK_REPO_URL=" + repo.Base + "/{repo}.git",
		"LOGBOOK_ADMINS=" + ada}
	a := e.serve(append([]string{"SLACK_API_URL=" + proxy.URL + "/api/"}, cfg...)...)
	if _, err := e.emu.SlashCommand(slackemu.SlashCommand{Command: "/logbook", Text: "config surface code_channel", User: ada, Channel: general}); err != nil {
		t.Fatal(err)
	}
	e.waitFor("the setting's answer", func() bool {
		for _, m := range e.emu.Ephemerals() {
			if strings.Contains(m.Text, "is now `code_channel`") {
				return true
			}
		}
		return false
	})
	top := e.post(slackemu.Post{Channel: general, User: ada, Text: mention("what is this repository?")})
	select {
	case <-made:
	case <-time.After(60 * time.Second):
		t.Fatalf("no code channel was made; logbook said:\n%s", a.out.String())
	}
	if err := a.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-a.done
	s := e.session(top.TS)
	if n := len(e.events(s.ID, session.TypeCodeChannelCreated)); n != 0 || len(e.emu.CodeChannels()) != 1 {
		t.Fatalf("before the restart: %d code_channel_created, %d code channels; want Slack's channel and no record", n, len(e.emu.CodeChannels()))
	}

	e.serve(cfg...)
	e.waitFor("turn_completed", func() bool { return len(e.events(s.ID, session.TypeTurnCompleted)) == 1 })
	ccs := e.emu.CodeChannels()
	if len(ccs) != 1 || ccs[0].SessionID != s.ID.String() {
		t.Fatalf("code channels %+v: want one, for the session", ccs)
	}
	if n := e.emu.Calls("agents.conversations.create"); n != 2 {
		t.Fatalf("agents.conversations.create called %d times; want the killed call and its retry", n)
	}
	var c session.CodeChannelCreated
	if evs := e.events(s.ID, session.TypeCodeChannelCreated); len(evs) != 1 || evs[0].Decode(&c) != nil || c.ChannelID != ccs[0].ID {
		t.Fatalf("code_channel_created %+v: want channel %s once", c, ccs[0].ID)
	}
	if len(ccs[0].Commands) == 0 || !slicesHasName(ccs[0].Commands, "config") {
		t.Fatalf("the code channel's commands %+v: want /logbook's subcommands", ccs[0].Commands)
	}
	replies := e.emu.BotReplies(general, top.TS)
	if len(replies) != 1 || !strings.Contains(replies[0].Text, "It is the api.") || !strings.Contains(string(replies[0].Blocks), ccs[0].ID) {
		t.Fatalf("replies %+v: want the answer once, linking the code channel", replies)
	}
}

func slicesHasName(cmds []slackemu.AgentCommand, name string) bool {
	for _, c := range cmds {
		if c.Name == name {
			return true
		}
	}
	return false
}
