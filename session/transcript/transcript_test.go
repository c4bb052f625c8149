package transcript_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"go.uber.org/goleak"

	"github.com/logbook/logbook/session"
	"github.com/logbook/logbook/session/transcript"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var update = flag.Bool("update", false, "rewrite the golden files under testdata")

var (
	sessionID = uuid.MustParse("0190f3a2-0000-7000-8000-000000000001")
	sess      = session.Session{ID: sessionID, Key: session.ThreadKey{Team: "T0000001", Channel: "C0000001", ThreadTS: "1700000000.001200"},
		CreatedAt: time.Date(2023, 11, 14, 22, 13, 20, 0, time.UTC)}
	alice = session.Actor{Kind: session.ActorUser, ID: "U0000001"}
	bot   = session.Actor{Kind: session.ActorBot, ID: "UB000001"}
	sys   = session.Actor{Kind: session.ActorSystem, ID: "cell"}
	box   = session.Actor{Kind: session.ActorSandbox, ID: "bwrap"}
)

// builder makes events with fixed ids and times, as the store would return them.
type builder struct {
	evs []session.Event
	t   time.Time
}

func (b *builder) add(typ session.Type, actor session.Actor, payload any) {
	raw, err := json.Marshal(payload)
	if err != nil {
		panic(err)
	}
	seq := int64(len(b.evs) + 1)
	b.t = b.t.Add(1500 * time.Millisecond)
	b.evs = append(b.evs, session.Event{
		SessionID: sessionID, Seq: seq, ID: uuid.MustParse(fmt.Sprintf("0190f3a2-0000-7000-8000-%012d", seq)),
		Type: typ, Actor: actor, CreatedAt: b.t, Payload: raw,
	})
}

func (b *builder) user(ts, text, raw string, names map[string]string) {
	b.add(session.TypeUserMessage, alice, session.UserMessage{Team: "T0000001", Channel: "C0000001",
		ThreadTS: "1700000000.001200", TS: ts, User: "U0000001", UserName: "alice", Text: text, Raw: raw, Names: names})
}

// fullSession has every kind of entry: mentions, code blocks, emoji, entities, tool calls
// with long output, an edit, a deletion, a message that was edited and then deleted, and
// markers between and after the conversation.
func fullSession() []session.Event {
	b := &builder{t: time.Date(2023, 11, 14, 22, 13, 20, 0, time.UTC)}
	b.user("1700000000.001200", "@logbook why is billing-api failing? cc @bob :eyes:",
		"<@UB000001> why is billing-api failing? cc <@U0000002> :eyes:", map[string]string{"UB000001": "logbook", "U0000002": "bob"})
	b.add(session.TypeTurnStarted, sys, session.TurnStarted{Through: 1, Reason: "message"})
	b.add(session.TypeAssistantMessage, bot, session.AssistantMessage{Text: "Let me look at the pods.", ToolCallIDs: []string{"call_1"}, Turn: 2})
	b.add(session.TypeToolCall, bot, session.ToolCall{CallID: "call_1", Name: "shell", Input: json.RawMessage(`{"cmd":"kubectl get pods -n billing"}`)})
	var out strings.Builder
	out.WriteString("NAME                          READY   STATUS             RESTARTS\n")
	for i := range 12 {
		fmt.Fprintf(&out, "billing-api-7d9f8-%02d           0/1     CrashLoopBackOff   %d\n", i, 5+i)
	}
	exit := 0
	b.add(session.TypeToolResult, box, session.ToolResult{CallID: "call_1", Content: out.String(), ExitCode: &exit, DurationMS: 412})
	b.add(session.TypeAssistantMessage, bot, session.AssistantMessage{Text: "The pods crash on start. The log says:\n```\npanic: missing env DATABASE_URL\n```\nSet it in the deployment, then `kubectl rollout restart`. :rocket:\nDocs: <https://wiki.example/billing|billing runbook> and https://k8s.io/docs.", Turn: 2})
	b.add(session.TypeDelivered, sys, session.Delivered{EventID: "x", Seq: 6, Channel: "C0000001", TS: []string{"1700000010.000100"}})
	b.add(session.TypeTurnCompleted, sys, session.TurnCompleted{Turn: 2, Status: "ok"})
	b.add(session.TypeTitle, bot, session.Title{Text: "billing-api crash loop"})
	b.user("1700000015.001500", "deploy to staging", "deploy to staging", nil)
	b.user("1700000016.001600", "token is sk-XXXX", "token is sk-XXXX", nil)
	b.add(session.TypeUserMessageEdited, alice, session.UserMessageEdited{OrigTS: "1700000015.001500", EditTS: "1700000100.000000", User: "U0000001", Text: "deploy to prod"})
	b.add(session.TypeUserMessageDeleted, alice, session.UserMessageDeleted{DeletedTS: "1700000016.001600", User: "U0000001"})
	b.user("1700000022.001700", "", "a &amp; b &lt;tag&gt; in <#C0000009|ops> see <https://ci.example/1>", nil)
	b.user("1700000024.001800", "We've 3 < 5 && x > 2 <script>alert(1)</script>", "", nil)
	b.add(session.TypeToolCall, bot, session.ToolCall{CallID: "call_2", Name: "http_get", Input: json.RawMessage(`{"url":"https://status.example","timeout_ms":2000}`)})
	b.add(session.TypeToolResult, box, session.ToolResult{CallID: "call_2", Content: "connection refused", IsError: true, DurationMS: 2001})
	b.add(session.TypeError, sys, session.ErrorEvent{Stage: "delivery", Code: "ratelimited", Message: "Slack asked to retry after 1s"})
	b.add(session.TypeCellEvicted, sys, session.CellEvicted{Reason: "idle"})
	return b.evs
}

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read golden file (run go test -update to create it): %v", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from the golden file (go test -update rewrites it)\n--- got ---\n%s", path, got)
	}
}

func TestGoldenFormats(t *testing.T) {
	t.Parallel()
	evs := fullSession()
	la, err := time.LoadLocation("America/Los_Angeles")
	if err != nil {
		t.Fatal(err)
	}
	variants := []struct {
		name string
		opts transcript.Options
	}{
		{"conversation", transcript.Options{Permalink: "https://acme.slack.com/archives/C0000001/p1700000000001200?thread_ts=1700000000.001200&cid=C0000001"}},
		{"all", transcript.Options{All: true}},
		{"auditor-la", transcript.Options{RevealDeleted: true, Location: la}},
	}
	exts := map[transcript.Format]string{transcript.FormatText: "txt", transcript.FormatMarkdown: "md", transcript.FormatHTML: "html", transcript.FormatJSON: "json"}
	for _, v := range variants {
		for f, ext := range exts {
			opts := v.opts
			opts.Format = f
			var b bytes.Buffer
			if err := transcript.Render(&b, sess, evs, opts); err != nil {
				t.Fatal(err)
			}
			golden(t, v.name+"."+ext, b.Bytes())
		}
	}
}

func render(t *testing.T, evs []session.Event, opts transcript.Options) string {
	t.Helper()
	var b bytes.Buffer
	if err := transcript.Render(&b, sess, evs, opts); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// The latest text with "(edited)"; a deletion hides the text from all but auditors.
func TestEditsAndDeletions(t *testing.T) {
	t.Parallel()
	evs := fullSession()
	for _, f := range []transcript.Format{transcript.FormatText, transcript.FormatMarkdown, transcript.FormatHTML, transcript.FormatJSON} {
		out := render(t, evs, transcript.Options{Format: f})
		for _, want := range []string{"deploy to prod", "(edited)", "[message deleted]"} {
			if f == transcript.FormatJSON && want != "deploy to prod" {
				continue
			}
			if !strings.Contains(out, want) {
				t.Errorf("%s: missing %q", f, want)
			}
		}
		for _, never := range []string{"sk-XXXX", "staging"} {
			if strings.Contains(out, never) {
				t.Errorf("%s: shows %q to a reader who is not an auditor", f, never)
			}
		}
		audit := render(t, evs, transcript.Options{Format: f, RevealDeleted: true})
		if !strings.Contains(audit, "sk-XXXX") {
			t.Errorf("%s: the auditor view does not show what the deleted message said", f)
		}
	}
	tr := transcript.Build(sess, evs, transcript.Options{})
	var deleted, edited int
	for _, e := range tr.Entries {
		if e.Deleted {
			deleted++
			if e.Text != "" || e.DeletedText != "" {
				t.Errorf("deleted entry keeps text: %+v", e)
			}
		}
		if e.Edited {
			edited++
		}
	}
	if deleted != 1 || edited != 1 {
		t.Errorf("deleted %d, edited %d; want 1 and 1", deleted, edited)
	}
}

// Markers are recognised by type wherever they are, and the conversation is complete
// wherever it is: nothing assumes the last event is the reply.
func TestMarkersFilteredByType(t *testing.T) {
	t.Parallel()
	evs := fullSession()
	conv := transcript.Build(sess, evs, transcript.Options{})
	all := transcript.Build(sess, evs, transcript.Options{All: true})
	var kinds []string
	for _, e := range conv.Entries {
		if e.Kind == transcript.KindMarker {
			t.Errorf("conversation view shows marker %q", e.Marker)
		}
		kinds = append(kinds, e.Kind)
	}
	if got, want := strings.Join(kinds, ","), "user,assistant,tool,assistant,user,user,user,user,tool"; got != want {
		t.Errorf("conversation kinds = %s, want %s", got, want)
	}
	markers := 0
	for _, e := range all.Entries {
		if e.Kind == transcript.KindMarker {
			markers++
		}
	}
	// turn_started, delivered, turn_completed, title, edited, deleted, error, cell_evicted
	if markers != 8 {
		t.Errorf("--all shows %d markers, want 8", markers)
	}
	if conv.Title != "billing-api crash loop" {
		t.Errorf("title = %q, want it from the title event even without --all", conv.Title)
	}
	// Reversing the tail (markers after the reply vs before it) changes nothing in the
	// conversation view.
	moved := append([]session.Event{}, evs[:5]...)
	moved = append(moved, evs[6:9]...) // delivered, completed, title before the reply
	moved = append(moved, evs[5])
	moved = append(moved, evs[9:]...)
	var texts []string
	for _, e := range transcript.Build(sess, moved, transcript.Options{}).Entries {
		texts = append(texts, e.Kind)
	}
	if got := strings.Join(texts, ","); got != strings.Join(kinds, ",") {
		t.Errorf("after moving markers: %s, want %s", got, strings.Join(kinds, ","))
	}
}

func TestMentionsEntitiesAndEscaping(t *testing.T) {
	t.Parallel()
	evs := fullSession()
	text := render(t, evs, transcript.Options{})
	for _, want := range []string{
		"@logbook why is billing-api failing? cc @bob 👀", // mentions, emoji
		"a & b <tag> in #ops see https://ci.example/1",   // raw-only text decoded
		"billing runbook (https://wiki.example/billing)", // Slack link with a label
		"We've 3 < 5 && x > 2",                           // model text as written
		"panic: missing env DATABASE_URL",                // code block kept
		"… 5 more lines",                                 // compact tool output
	} {
		if !strings.Contains(text, want) {
			t.Errorf("text transcript lacks %q", want)
		}
	}
	page := render(t, evs, transcript.Options{Format: transcript.FormatHTML})
	if strings.Contains(page, "<script>alert") || !strings.Contains(page, "&lt;script&gt;alert(1)&lt;/script&gt;") {
		t.Error("HTML transcript does not escape message text")
	}
	if !strings.Contains(page, `<pre><code>panic: missing env DATABASE_URL</code></pre>`) {
		t.Error("HTML transcript does not render the code block as code")
	}
	// A later rename changes nothing: names come from the stored payload.
	if strings.Contains(text, "U0000002") {
		t.Error("a mention is shown as a user id, not the captured display name")
	}
	all := render(t, evs, transcript.Options{All: true})
	if strings.Contains(all, "more lines") {
		t.Error("--all still clips tool output")
	}
}

func TestTimes(t *testing.T) {
	t.Parallel()
	evs := fullSession()
	tr := transcript.Build(sess, evs, transcript.Options{})
	if got := tr.Entries[0].TimeText; got != "2023-11-14T22:13:20Z" { // the Slack ts of the message
		t.Errorf("UTC time = %s, want ISO 8601", got)
	}
	tokyo, err := time.LoadLocation("Asia/Tokyo")
	if err != nil {
		t.Fatal(err)
	}
	tr = transcript.Build(sess, evs, transcript.Options{Location: tokyo})
	if got := tr.Entries[0].TimeText; got != "2023-11-15 07:13:20 JST" {
		t.Errorf("Tokyo time = %s", got)
	}
}

func TestJSONRoundTrips(t *testing.T) {
	t.Parallel()
	out := render(t, fullSession(), transcript.Options{Format: transcript.FormatJSON, All: true})
	var got transcript.Transcript
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatal(err)
	}
	if got.SessionID != sessionID || got.Title != "billing-api crash loop" || len(got.Entries) != 17 {
		t.Errorf("decoded %v %q with %d entries", got.SessionID, got.Title, len(got.Entries))
	}
}

func TestUnreadableAndPurgedPayloadsAreVisible(t *testing.T) {
	t.Parallel()
	evs := []session.Event{
		{SessionID: sessionID, Seq: 1, Type: session.TypeUserMessage, Actor: alice, CreatedAt: time.Unix(1700000000, 0), Payload: json.RawMessage(`{"text": 5}`)},
		{SessionID: sessionID, Seq: 2, Type: session.TypeUserMessage, Actor: alice, CreatedAt: time.Unix(1700000001, 0)},
	}
	out := render(t, evs, transcript.Options{})
	if !strings.Contains(out, "user_message event with an unreadable payload") || !strings.Contains(out, "purged by retention") {
		t.Errorf("bad payloads are not shown:\n%s", out)
	}
}

func TestParseFormat(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]transcript.Format{"": "text", "MD": "md", "markdown": "md", "html": "html", "json": "json"} {
		if got, err := transcript.ParseFormat(in); err != nil || got != want {
			t.Errorf("ParseFormat(%q) = %q, %v", in, got, err)
		}
	}
	if _, err := transcript.ParseFormat("pdf"); err == nil {
		t.Error("ParseFormat(pdf) succeeded")
	}
}

// BenchmarkRender renders a 10,000-event session in each format.
func BenchmarkRender(b *testing.B) {
	bb := &builder{t: time.Date(2023, 11, 14, 0, 0, 0, 0, time.UTC)}
	exit := 0
	for i := 0; len(bb.evs) < 10000; i++ {
		bb.user(fmt.Sprintf("1700000000.%06d", i), fmt.Sprintf("message %d from @alice about the deploy :rocket: see <https://ci.example/%d>", i, i), "", nil)
		bb.add(session.TypeTurnStarted, sys, session.TurnStarted{Through: int64(len(bb.evs))})
		bb.add(session.TypeToolCall, bot, session.ToolCall{CallID: fmt.Sprint("c", i), Name: "shell", Input: json.RawMessage(`{"cmd":"kubectl get pods"}`)})
		bb.add(session.TypeToolResult, box, session.ToolResult{CallID: fmt.Sprint("c", i), Content: strings.Repeat("pod-x 1/1 Running 0\n", 20), ExitCode: &exit})
		bb.add(session.TypeAssistantMessage, bot, session.AssistantMessage{Text: "All pods are running.\n```\nkubectl get pods\n```\nDone."})
		bb.add(session.TypeTurnCompleted, sys, session.TurnCompleted{Status: "ok"})
	}
	evs := bb.evs[:10000]
	for _, f := range []transcript.Format{transcript.FormatText, transcript.FormatMarkdown, transcript.FormatHTML, transcript.FormatJSON} {
		b.Run(string(f), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := transcript.Render(io.Discard, sess, evs, transcript.Options{Format: f}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// What people did to the bot's work — approvals and stops — shows in every transcript, not
// only with --all, with who did it; the bookkeeping around it (turn_suspended) only with --all.
func TestApprovalsAndStopsAreShown(t *testing.T) {
	t.Parallel()
	grace := session.Actor{Kind: session.ActorUser, ID: "U0000002"}
	b := &builder{t: time.Date(2023, 11, 14, 22, 13, 20, 0, time.UTC)}
	b.user("1700000000.001200", "@logbook clean up", "<@UB000001> clean up", nil)
	b.add(session.TypeTurnStarted, sys, session.TurnStarted{Through: 1})
	b.add(session.TypeAssistantMessage, bot, session.AssistantMessage{ToolCallIDs: []string{"call_1"}, Turn: 2})
	b.add(session.TypeToolCall, bot, session.ToolCall{CallID: "call_1", Name: "run_command", Input: json.RawMessage(`{"command":"rm -rf build"}`)})
	b.add(session.TypeApprovalRequested, session.Actor{Kind: session.ActorSystem, ID: "approval"},
		session.ApprovalRequested{Turn: 2, CallID: "call_1", Tool: "run_command", Summary: "$ rm -rf build", Channel: "C0000001"})
	b.add(session.TypeTurnSuspended, sys, session.TurnSuspended{Turn: 2, CallID: "call_1", Until: b.t.Add(time.Hour)})
	b.add(session.TypeApprovalDecided, alice, session.ApprovalDecided{CallID: "call_1", Decision: session.DecisionDenied, Via: "button"})
	b.add(session.TypeStopRequested, grace, session.StopRequested{Source: "button"})
	b.add(session.TypeTurnStopped, sys, session.TurnStopped{Turn: 2, By: "U0000002", Source: "button", Request: 8})
	var out bytes.Buffer
	if err := transcript.Render(&out, sess, b.evs, transcript.Options{}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"approval requested: run_command call call_1 waits for a person: $ rm -rf build",
		"approval decided: call call_1 denied by U0000001 (button)",
		"stop requested: by U0000002 (button)",
		"turn stopped: turn #2 stopped by U0000002 (button)",
		"→ denied by U0000001, no result recorded", // on the call itself, before any result
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("transcript lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "turn suspended") {
		t.Errorf("the conversation view shows turn_suspended:\n%s", out.String())
	}
	out.Reset()
	if err := transcript.Render(&out, sess, b.evs, transcript.Options{All: true}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "turn suspended: turn #2 sleeps until call call_1 is decided") {
		t.Errorf("--all lacks turn_suspended:\n%s", out.String())
	}
}

// Issue 28: a command cancelled by a stop shows as stopped, and by whom, in every format —
// not as an outcome unknown after a crash, which is what a synthetic result alone says.
func TestGoldenStoppedCommand(t *testing.T) {
	t.Parallel()
	grace := session.Actor{Kind: session.ActorUser, ID: "U0000002"}
	b := &builder{t: time.Date(2023, 11, 14, 22, 13, 20, 0, time.UTC)}
	b.user("1700000000.001200", "@logbook run the whole test suite", "<@UB000001> run the whole test suite", nil)
	b.add(session.TypeTurnStarted, sys, session.TurnStarted{Through: 1, Reason: "message"})
	b.add(session.TypeAssistantMessage, bot, session.AssistantMessage{Text: "Running it.", ToolCallIDs: []string{"call_1"}, Turn: 2})
	b.add(session.TypeToolCall, bot, session.ToolCall{CallID: "call_1", Name: "run_command", Input: json.RawMessage(`{"command":"make test"}`)})
	b.add(session.TypeStopRequested, grace, session.StopRequested{Source: "button"})
	b.add(session.TypeToolResult, sys, session.ToolResult{CallID: "call_1", IsError: true, Synthetic: true, StoppedBy: "U0000002",
		Content: "stopped by U0000002 while it ran; its outcome is unknown"})
	b.add(session.TypeTurnStopped, sys, session.TurnStopped{Turn: 2, By: "U0000002", Source: "button", Request: 5, Shown: "Running it."})
	b.add(session.TypeTurnCompleted, sys, session.TurnCompleted{Turn: 2, Status: session.StatusStopped, Reason: "button", Through: 1})
	exts := map[transcript.Format]string{transcript.FormatText: "txt", transcript.FormatMarkdown: "md", transcript.FormatHTML: "html", transcript.FormatJSON: "json"}
	for f, ext := range exts {
		var out bytes.Buffer
		if err := transcript.Render(&out, sess, b.evs, transcript.Options{Format: f}); err != nil {
			t.Fatal(err)
		}
		if f != transcript.FormatJSON && (!strings.Contains(out.String(), "stopped by U0000002 while it ran") || strings.Contains(out.String(), "after a crash")) {
			t.Errorf("%s: the stopped command does not say it was stopped, and by whom:\n%s", ext, out.String())
		}
		golden(t, "stopped."+ext, out.Bytes())
	}
}

// A channel's ledger reads as the channel's history of changes (issue 49), and a turn's
// turn_settings names the ledger position it ran under.
func TestLedgerEventsAndTheTurnsLedgerPosition(t *testing.T) {
	t.Parallel()
	b := &builder{t: time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)}
	terse := "Be terse."
	b.add(session.TypeSettingChanged, alice, session.SettingChanged{ID: 1, Team: "T0000001", Name: "instructions", New: &terse, By: "U0000001", Via: session.ViaSlash})
	b.add(session.TypeNoteAdded, bot, session.NoteAdded{ID: 7, Team: "T0000001", Text: "deploys on Tuesdays", ByKind: session.NoteByAgent, By: "UB000001", Via: session.ViaAgent})
	b.add(session.TypeNoteForgotten, alice, session.NoteForgotten{Note: 7, By: "U0000001", Via: session.ViaSlash})
	b.add(session.TypeRepoSet, alice, session.RepoSet{ID: 2, URL: "https://github.com/acme/app", Branch: "main", By: "U0000001", Via: session.ViaSlash})
	b.add(session.TypeScheduleRemoved, sys, session.ScheduleRemoved{Schedule: 3, By: "system", Reason: "the channel went private", Via: session.ViaLogbook})
	b.add(session.TypeConnectorConnected, alice, session.ConnectorConnected{Server: "docs", By: "ada@example.com", Via: session.ViaWeb})
	b.add(session.TypeTurnSettings, sys, session.TurnSettings{Turn: 9, Hash: strings.Repeat("ab", 32), Model: "m", LedgerSeq: 6, LedgerHash: strings.Repeat("cd", 32)})
	out := render(t, b.evs, transcript.Options{All: true})
	for _, want := range []string{`instructions: default → "Be terse." (slash_command)`, `note 7: "deploys on Tuesdays" (agent_tool)`,
		"note 7 forgotten", "https://github.com/acme/app main", "schedule 3 removed: the channel went private (logbook)",
		"docs connected (web)", "channel ledger #6 cdcdcdcd"} {
		if !strings.Contains(out, want) {
			t.Errorf("the transcript lacks %q:\n%s", want, out)
		}
	}
}
