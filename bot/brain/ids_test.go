package brain_test

import (
	"bytes"
	"context"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/logbook/logbook/bot/brain/fakeprovider"
	"github.com/logbook/logbook/session"
)

var anthropicID = regexp.MustCompile(`^[a-zA-Z0-9_-]+$`)

// The fakes refuse the ids the real APIs refuse: Anthropic's tool_use ids must match
// ^[a-zA-Z0-9_-]+$, OpenAI's tool_call ids are at most 40 characters.
func TestFakesValidateToolIDs(t *testing.T) {
	t.Parallel()
	anth := fakeprovider.NewAnthropic(t, anthropicKey)
	body := `{"model":"m","max_tokens":10,"tools":[{"name":"run_command","input_schema":{"type":"object"}}],"messages":[
		{"role":"user","content":"hi"},
		{"role":"assistant","content":[{"type":"tool_use","id":"functions.run_command:0","name":"run_command","input":{}}]},
		{"role":"user","content":[{"type":"tool_result","tool_use_id":"functions.run_command:0","content":"ok"}]}]}`
	req, _ := http.NewRequest(http.MethodPost, anth.URL+"v1/messages", strings.NewReader(body))
	req.Header.Set("X-Api-Key", anthropicKey)
	req.Header.Set("Anthropic-Version", "2023-06-01")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if calls := anth.Calls(); resp.StatusCode != 400 || len(calls) != 1 || !strings.Contains(calls[0].Invalid, "should match pattern") {
		t.Errorf("anthropic: status %d, calls %+v", resp.StatusCode, calls)
	}

	oai := fakeprovider.NewOpenAI(t, openAIKey)
	long := strings.Repeat("x", 41)
	body = `{"model":"m","tools":[{"type":"function","function":{"name":"run_command","parameters":{"type":"object"}}}],"messages":[
		{"role":"user","content":"hi"},
		{"role":"assistant","content":null,"tool_calls":[{"id":"` + long + `","type":"function","function":{"name":"run_command","arguments":"{}"}}]},
		{"role":"tool","tool_call_id":"` + long + `","content":"ok"}]}`
	req, _ = http.NewRequest(http.MethodPost, oai.URL+"chat/completions", bytes.NewReader([]byte(body)))
	req.Header.Set("Authorization", "Bearer "+openAIKey)
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if calls := oai.Calls(); resp.StatusCode != 400 || len(calls) != 1 || !strings.Contains(calls[0].Invalid, "maximum length 40") {
		t.Errorf("openai: status %d, calls %+v", resp.StatusCode, calls)
	}
}

// A session whose tool calls one provider wrote is continued by the other: the ids are mapped
// to ones the second accepts, the same way for a tool_use and its tool_result and on every
// request, and the log keeps the ids as the first provider sent them.
func TestSwitchingProviderMapsToolIDs(t *testing.T) {
	t.Parallel()
	cases := []struct {
		first, then string
		ids         []string // ids the first provider writes
		valid       func(string) bool
	}{
		{"openai", "anthropic", []string{"functions.run_command:0", "call_abc"}, anthropicID.MatchString},
		{"anthropic", "openai", []string{"toolu_01ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijkl", "toolu_01short"},
			func(id string) bool { return len(id) <= 40 }},
	}
	for _, c := range cases {
		t.Run(c.first+" then "+c.then, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			e.titled()
			hands := &fakeHands{}
			fake1, p1 := fakeFor(t, c.first)
			fake1.Push(
				fakeprovider.Reply{ToolCalls: []fakeprovider.ToolCall{
					{ID: c.ids[0], Name: "run_command", Input: `{"command":"ls"}`},
					{ID: c.ids[1], Name: "run_command", Input: `{"command":"pwd"}`},
				}},
				fakeprovider.Reply{Text: "Listed."},
			)
			b1, _ := newBrain(t, p1, nil)
			seq, _ := e.user("list the files")
			turn1 := e.startTurn(seq)
			if _, err := b1.Run(context.Background(), e.turn(hands, turn1)); err != nil {
				t.Fatal(err)
			}
			mustAllValid(t, fake1, 2)
			var logged []string
			for _, ev := range e.after(turn1) {
				if ev.Type == session.TypeToolCall {
					logged = append(logged, decode[session.ToolCall](t, ev).CallID)
				}
			}
			if strings.Join(logged, ",") != strings.Join(c.ids, ",") {
				t.Fatalf("logged ids %q, want %q as the provider sent them", logged, c.ids)
			}

			fake2, p2 := fakeFor(t, c.then)
			b2, _ := newBrain(t, p2, nil)
			for i, q := range []string{"and now?", "once more?"} {
				fake2.Push(fakeprovider.Reply{Text: "Same files."})
				seq, _ := e.user(q)
				tr := e.startTurn(seq)
				r, err := b2.Run(context.Background(), e.turn(hands, tr))
				if err != nil {
					t.Fatal(err)
				}
				if r.Status != session.StatusOK || r.Message.Text != "Same files." {
					t.Fatalf("turn %d reply = %+v", i+2, r)
				}
			}
			calls := mustAllValid(t, fake2, 2)
			var sent [][]string
			for _, call := range calls {
				var uses, results []string
				for _, m := range call.Messages {
					for _, b := range m.Blocks {
						switch b.Type {
						case "tool_use":
							uses = append(uses, b.ID)
						case "tool_result":
							results = append(results, b.ToolUseID)
						}
					}
				}
				if strings.Join(uses, ",") != strings.Join(results, ",") || len(uses) != 2 {
					t.Errorf("tool_use ids %q and tool_result ids %q differ", uses, results)
				}
				for _, id := range uses {
					if !c.valid(id) {
						t.Errorf("id %q sent to %s is not one it accepts", id, c.then)
					}
				}
				sent = append(sent, uses)
			}
			if strings.Join(sent[0], ",") != strings.Join(sent[1], ",") {
				t.Errorf("the mapping is not deterministic: %q then %q", sent[0], sent[1])
			}
			if sent[0][1] != c.ids[1] {
				t.Errorf("an id %s accepts was changed: %q -> %q", c.then, c.ids[1], sent[0][1])
			}
		})
	}
}
