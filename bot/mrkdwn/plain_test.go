package mrkdwn

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/slack-go/slack"
)

func testNames(kind, id string) string {
	switch kind + ":" + id {
	case "user:U0000001":
		return "ada"
	case "channel:C0000002":
		return "ops"
	case "usergroup:S0000001":
		return "oncall"
	}
	return ""
}

// A message that is only the bot mention becomes empty.
func TestStripBotMention(t *testing.T) {
	t.Parallel()
	tests := []struct{ in, want string }{
		{"<@UB000001>", ""},
		{"  <@UB000001>  ", ""},
		{"<@UB000001> deploy", "deploy"},
		{"<@UB000001>: deploy", "deploy"},
		{"<@UB000001|bot>, deploy", "deploy"},
		{"please <@UB000001> deploy", "please deploy"},
		{"ask <@U0000001> and <@UB000001>", "ask <@U0000001> and"},
		{"a &lt;b&gt; <@UB000001>x", "a &lt;b&gt; x"},
		{"no mention", "no mention"},
	}
	for _, tt := range tests {
		if got := StripBotMention(tt.in, "UB000001"); got != tt.want {
			t.Errorf("StripBotMention(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// Content only in rich_text blocks reaches the model.
func TestBlocksTextC09(t *testing.T) {
	t.Parallel()
	var ev struct {
		Blocks json.RawMessage `json:"blocks"`
	}
	event := `{"type":"message","user":"U0000001","text":"","blocks":[{"type":"rich_text","block_id":"b1","elements":[{"type":"rich_text_section","elements":[{"type":"text","text":"rollback failed on "},{"type":"link","url":"https://ci.example/1"}]}]}],"ts":"1700000000.001700","thread_ts":"1700000000.001200","channel":"C0000001","channel_type":"channel"}`
	if err := json.Unmarshal([]byte(event), &ev); err != nil {
		t.Fatal(err)
	}
	got, err := BlocksText(ev.Blocks, nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := "rollback failed on https://ci.example/1"; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
}

func TestBlocksText(t *testing.T) {
	t.Parallel()
	tests := []struct{ name, in, want string }{
		{"null", `null`, ""},
		{"empty", ``, ""},
		{"elements", `[{"type":"rich_text","elements":[{"type":"rich_text_section","elements":[
			{"type":"text","text":"hi ","style":{"bold":true}},{"type":"user","user_id":"U0000001"},
			{"type":"text","text":" in "},{"type":"channel","channel_id":"C0000002"},
			{"type":"text","text":" "},{"type":"usergroup","usergroup_id":"S0000009"},
			{"type":"text","text":" "},{"type":"broadcast","range":"here"},
			{"type":"text","text":" "},{"type":"emoji","name":"thumbsup","unicode":"1f44d-1f3fd"},
			{"type":"emoji","name":"partyparrot"},
			{"type":"text","text":" "},{"type":"link","url":"https://x.io","text":"docs"},
			{"type":"text","text":" "},{"type":"date","timestamp":1700000000,"fallback":"Nov 14"},
			{"type":"text","text":" "},{"type":"color","value":"#FF0000"},
			{"type":"text","text":" run "},{"type":"text","text":"make","style":{"code":true}}]}]}]`,
			"hi @ada in #ops @S0000009 @here 👍🏽:partyparrot: docs (https://x.io) Nov 14 #FF0000 run `make`"},
		{"list quote pre", `[{"type":"rich_text","elements":[
			{"type":"rich_text_section","elements":[{"type":"text","text":"steps:\n"}]},
			{"type":"rich_text_list","style":"ordered","indent":0,"elements":[
				{"type":"rich_text_section","elements":[{"type":"text","text":"build"}]},
				{"type":"rich_text_section","elements":[{"type":"text","text":"ship"}]}]},
			{"type":"rich_text_list","style":"bullet","indent":1,"elements":[
				{"type":"rich_text_section","elements":[{"type":"text","text":"sub"}]}]},
			{"type":"rich_text_quote","elements":[{"type":"text","text":"quoted\nlines"}]},
			{"type":"rich_text_preformatted","elements":[{"type":"text","text":"x := 1"}]}]}]`,
			"steps:\n1. build\n2. ship\n  • sub\n> quoted\n> lines\n```\nx := 1\n```"},
		{"ordered offset", `[{"type":"rich_text","elements":[{"type":"rich_text_list","style":"ordered","offset":2,"elements":[
			{"type":"rich_text_section","elements":[{"type":"text","text":"c"}]}]}]}]`, "3. c"},
		{"section header context", `[{"type":"header","text":{"type":"plain_text","text":"Deploy"}},
			{"type":"section","text":{"type":"mrkdwn","text":"*ok* &amp; <@U0000001>"},"fields":[{"type":"plain_text","text":"f1"}]},
			{"type":"divider"},
			{"type":"context","elements":[{"type":"mrkdwn","text":"ctx"},{"type":"image","image_url":"u","alt_text":"logo"}]}]`,
			"Deploy\n*ok* & @ada\nf1\nctx logo"},
		{"unknown types keep text", `[{"type":"rich_text","elements":[{"type":"rich_text_section","elements":[
			{"type":"text","text":"a "},{"type":"future_thing","text":"b"},{"type":"other","fallback":" c"},
			{"type":"third","elements":[{"type":"text","text":" d"}]}]}]},
			{"type":"new_block","text":{"type":"plain_text","text":"e"}}]`, "a b c d\ne"},
		{"single object", `{"type":"rich_text","elements":[{"type":"rich_text_section","elements":[{"type":"text","text":"x"}]}]}`, "x"},
		{"wrong field types", `[{"type":"rich_text","elements":[{"type":"rich_text_list","indent":"x","elements":[1,"a",null,{"type":"rich_text_section","elements":[{"type":"text","text":7}]}]}]}]`, "• 7"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := BlocksText(json.RawMessage(tt.in), testNames)
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Fatalf("got %q\nwant %q", got, tt.want)
			}
		})
	}
}

func TestBlocksTextErrors(t *testing.T) {
	t.Parallel()
	for _, in := range []string{`{`, `"text"`, `[1,`} {
		if _, err := BlocksText(json.RawMessage(in), nil); err == nil || !strings.Contains(err.Error(), "decode blocks") {
			t.Errorf("BlocksText(%q) error = %v, want a decode error", in, err)
		}
	}
}

// Blocks built with slack-go marshal to JSON that BlocksText reads.
func TestBlocksTextFromSlackGo(t *testing.T) {
	t.Parallel()
	blocks := slack.Blocks{BlockSet: []slack.Block{
		slack.NewRichTextBlock("b1", slack.NewRichTextSection(
			slack.NewRichTextSectionTextElement("see ", nil),
			slack.NewRichTextSectionLinkElement("https://x.io", "", nil),
			slack.NewRichTextSectionUserElement("U0000001", nil),
		)),
		slack.NewSectionBlock(slack.NewTextBlockObject(slack.MarkdownType, "a &lt; b", false, false), nil, nil),
	}}
	raw, err := json.Marshal(blocks)
	if err != nil {
		t.Fatal(err)
	}
	got, err := BlocksText(raw, testNames)
	if err != nil {
		t.Fatal(err)
	}
	if want := "see https://x.io@ada\na < b"; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
}

func TestAttachmentsText(t *testing.T) {
	t.Parallel()
	in := `[{"pretext":"pre","title":"Build &amp; test","title_link":"https://ci/1","text":"failed <@U0000001>",
		"fields":[{"title":"env","value":"prod"},{"title":"","value":"solo"}]},
		{"fallback":"only fallback"}, 3]`
	got, err := AttachmentsText(json.RawMessage(in), testNames)
	if err != nil {
		t.Fatal(err)
	}
	want := "pre\nBuild & test (https://ci/1)\nfailed @ada\nenv: prod\nsolo\nonly fallback"
	if got != want {
		t.Fatalf("got %q\nwant %q", got, want)
	}
	if _, err := AttachmentsText(json.RawMessage(`nope`), nil); err == nil {
		t.Fatal("want an error for invalid JSON")
	}
}
