package slashcmd_test

import (
	"context"
	"strings"
	"testing"

	"github.com/slack-go/slack"
	"go.uber.org/goleak"

	"github.com/logbook/logbook/bot/slashcmd"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// echo answers with what its command was given.
func echo(_ context.Context, c slashcmd.Call) string {
	return c.Command + "|" + c.Args + "|" + c.Team + "|" + map[bool]string{true: "external", false: "home"}[c.External]
}

func table() *slashcmd.Table {
	return slashcmd.New("T1", slashcmd.Help{Intro: []string{"title", "about"}, Outro: "the end"}).Add(
		slashcmd.Command{Name: "open", Usage: "`/logbook open` for anyone", Run: echo},
		slashcmd.Command{Name: "home", Usage: "`/logbook home` for the workspace", Who: slashcmd.Home, Refusal: "not for you", Run: echo},
		slashcmd.Command{Name: "quiet", Run: echo},
	)
}

// The text is parsed once: the name picks the command, the rest (trimmed) is its Args, the
// team falls back to the workspace's, and Who keeps people of other organisations out.
func TestTableRunsTheNamedCommandForWhoMayRunIt(t *testing.T) {
	t.Parallel()
	tb := table()
	ask := func(text, team string) string {
		return tb.Answer(context.Background(), slack.SlashCommand{Command: "/logbook", Text: text, TeamID: team, ChannelID: "C1"})
	}
	for _, c := range []struct{ text, team, want string }{
		{"open  a b ", "T1", "/logbook|a b|T1|home"},
		{"  open", "", "/logbook||T1|home"},
		{"open x", "T2", "/logbook|x|T2|external"},
		{"home x", "T1", "/logbook|x|T1|home"},
		{"home x", "T2", "not for you"},
		{"home x", "", "/logbook|x|T1|home"},
		{"quiet", "T2", "/logbook||T2|external"},
	} {
		if got := ask(c.text, c.team); got != c.want {
			t.Errorf("%q from %q: %q, want %q", c.text, c.team, got, c.want)
		}
	}
	if got, want := tb.Names(), []string{"open", "home", "quiet"}; strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("names %v, want %v", got, want)
	}
}

// Help is every command's line, in the order they were added, between the intro and the
// outro; nothing typed is help too; an unknown name is named (escaped, clipped) with the help.
func TestTableHelpListsEveryCommand(t *testing.T) {
	t.Parallel()
	tb := table()
	want := "title\n• about\n• `/logbook open` for anyone\n• `/logbook home` for the workspace\nthe end"
	for _, text := range []string{"", "help", " help me"} {
		if got := tb.Answer(context.Background(), slack.SlashCommand{Text: text}); got != want {
			t.Errorf("%q: %q, want %q", text, got, want)
		}
	}
	got := tb.Answer(context.Background(), slack.SlashCommand{Text: "<`x`>&" + strings.Repeat("y", 50)})
	if !strings.HasPrefix(got, "There is no `/logbook &lt;'x'&gt;&amp;"+strings.Repeat("y", 34)+"…`") || !strings.HasSuffix(got, "\n"+want) {
		t.Errorf("unknown: %q", got)
	}
}

// A name registered twice is a programming error, found at start-up.
func TestTableRefusesANameTwice(t *testing.T) {
	t.Parallel()
	for _, c := range []slashcmd.Command{{Name: "open", Run: echo}, {Name: "help", Run: echo}, {Name: "x"}} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%q was registered", c.Name)
				}
			}()
			table().Add(c)
		}()
	}
}

// The subcommands as a code channel's commands: each name, the first line of its usage; no
// table, none.
func TestAgentCommands(t *testing.T) {
	t.Parallel()
	got := table().AgentCommands()
	if len(got) != 3 || got[0] != (slack.AgentCommand{Name: "open", Description: "`/logbook open` for anyone"}) || got[2].Name != "quiet" || got[2].Description != "" {
		t.Fatalf("agent commands %+v", got)
	}
	var none *slashcmd.Table
	if cmds := none.AgentCommands(); cmds != nil {
		t.Fatalf("no table: %+v", cmds)
	}
}
