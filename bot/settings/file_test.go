package settings_test

import (
	"context"
	"strings"
	"testing"

	"github.com/logbook/logbook/bot/settings"
	"github.com/logbook/logbook/session"
)

// A settings file is read whole: every problem is named with its line, and a value is checked
// as /logbook config checks it (the Check of its setting, the limits, the budget's syntax).
func TestReadFileNamesEachProblemWithItsLine(t *testing.T) {
	t.Parallel()
	s := newSettings(&memStore{})
	for _, c := range []struct {
		name, file string
		want       []string // each a problem's text, in order; none: the file is good
	}{
		{"good", "channels:\n  C0000001:\n    model: openai:gpt-x\n    daily_budget: 12.50/day\n    setup: default\n", nil},
		{"not YAML", "channels: [\n", []string{"not a YAML settings file"}},
		{"empty", "", []string{"the file is empty"}},
		{"a list", "- C0000001\n", []string{"line 1: want a mapping"}},
		{"no channels", "teams: {}\n", []string{`line 1: unknown key "teams"`}},
		{"channels a list", "channels:\n  - C0000001\n", []string{"line 2: channels: want a mapping"}},
		{"not a channel id", "channels:\n  general:\n    model: openai:x\n", []string{`line 2: "general" is not a channel id`}},
		{"channel without a mapping", "channels:\n  C0000001: openai:x\n", []string{"line 2: C0000001: want a mapping"}},
		{"every bad setting", "channels:\n  C0000001:\n    model: gpt\n    modle: x\n    daily_budget: lots\n    setup: |\n      a\n      b\n    instructions:\n",
			[]string{"line 3: C0000001: model: want provider:model", `line 4: C0000001: unknown setting "modle"`,
				`line 5: C0000001: daily_budget: "lots" is not an amount per day`, "line 6: C0000001: setup: the setup command is one line",
				"line 9: C0000001: instructions: want a value"}},
		{"a setting twice", "channels:\n  C0000001:\n    model: a:b\n    model: c:d\n", []string{"line 4: C0000001: model is set twice (also line 3)"}},
		{"a channel twice", "channels:\n  C0000001:\n    model: a:b\n  C0000001:\n    setup: make\n", []string{"line 4: C0000001 is in the file twice (also line 2)"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			chans, problems := s.ReadFile([]byte(c.file))
			if len(problems) != len(c.want) {
				t.Fatalf("problems %q, want %d like %q", problems, len(c.want), c.want)
			}
			for i, w := range c.want {
				if !strings.Contains(problems[i], w) {
					t.Errorf("problem %d: %q, want it to contain %q", i, problems[i], w)
				}
			}
			if len(c.want) == 0 && (len(chans) != 1 || len(chans[0].Settings) != 3 || chans[0].Settings[2].Set) {
				t.Errorf("good file read as %+v", chans)
			}
			if len(c.want) > 0 && chans != nil {
				t.Errorf("a file with problems returned channels: %+v", chans)
			}
		})
	}
}

// Plan changes only what differs from the channel's records: a value the record holds, or
// "default" for a setting without a record, is no change; a value equal to the default but
// without a record is one (the file pins it). Apply writes each through the store, with who and
// how.
func TestPlanAndApplyChangeOnlyWhatDiffers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := &memStore{}
	s := newSettings(st)
	if _, err := s.Set(ctx, "T1", "C0000001", settings.DailyBudget, "30", true, "U0ADMIN"); err != nil {
		t.Fatal(err)
	}
	chans, problems := s.ReadFile([]byte("channels:\n  C0000001:\n    model: anthropic:default\n    daily_budget: \"30\"\n    setup: default\n    instructions: Be brief.\n"))
	if len(problems) > 0 {
		t.Fatal(problems)
	}
	plan, err := s.Plan(ctx, "T1", chans[0])
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range plan {
		got = append(got, c.Name)
	}
	if strings.Join(got, ",") != "model,instructions" {
		t.Fatalf("plan changes %q, want model (pinned) and instructions", got)
	}
	for _, c := range plan {
		if _, err := s.Apply(ctx, c, "ops", session.ViaFile); err != nil {
			t.Fatal(err)
		}
	}
	if plan, err = s.Plan(ctx, "T1", chans[0]); err != nil || len(plan) != 0 {
		t.Fatalf("after apply: %+v, %v; want no changes", plan, err)
	}
	last := st.rows[len(st.rows)-1]
	if last.SetBy != "ops" || last.Via != session.ViaFile || last.Name != settings.Instructions || last.New != "Be brief." {
		t.Errorf("the last write: %+v", last)
	}
	// A value that became invalid between plan and apply is refused by Apply too.
	if _, err := s.Apply(ctx, settings.Change{Team: "T1", Channel: "C0000001", Name: settings.Model, New: "gpt", Set: true}, "ops", session.ViaFile); err == nil {
		t.Error("Apply wrote a model Check refuses")
	}
}
