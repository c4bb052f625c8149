package bot_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/rs/zerolog"

	"github.com/logbook/logbook/audit"
	"github.com/logbook/logbook/bot"
	"github.com/logbook/logbook/bot/brain/fakeprovider"
	"github.com/logbook/logbook/bot/grants"
	"github.com/logbook/logbook/bot/replay"
	"github.com/logbook/logbook/bot/slackemu"
	"github.com/logbook/logbook/session"
	"github.com/logbook/logbook/session/thread"
)

// Approvals that separate duties (issue 52): approvers:N, not_requester, approvers_in, and
// scoped grants.

// clickCard clicks action on the card ts as user and waits for the answer's ack (the
// emulator returns once the interactive envelope is delivered).
func (h *harness) clickCard(ts, action, user string) {
	h.t.Helper()
	if _, err := h.emu.ClickButton(slackemu.Click{Channel: general, TS: ts, ActionID: action, User: user}); err != nil {
		h.t.Fatal(err)
	}
}

// ephemeral waits for the n-th ephemeral note to user that contains text.
func (h *harness) ephemeral(user, text string, n int) slackemu.Ephemeral {
	h.t.Helper()
	var found slackemu.Ephemeral
	h.waitFor("an ephemeral note to "+user+" saying "+text, func() bool {
		k := 0
		for _, e := range h.emu.Ephemerals() {
			if e.User == user && strings.Contains(e.Text, text) {
				if k++; k == n {
					found = e
					return true
				}
			}
		}
		return false
	})
	return found
}

func decoded[T any](t *testing.T, e session.Event) T {
	t.Helper()
	var v T
	if err := e.Decode(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

// approvers:2: the first approval is counted and the card says "1 of 2"; the same person's
// second click counts once (a note, and the refusal on the record); a second different
// person's approval decides, and the call runs. The decision names both approvers.
func TestApprovalTwoApproversCountedDistinct(t *testing.T) {
	t.Parallel()
	approvers, err := bot.ParseApprovers(ada + "," + grace)
	if err != nil {
		t.Fatal(err)
	}
	h, model := modelHarness(t, harnessOptions{approval: bot.ApprovalConfig{Policy: askFor(t, "run_command=ask approvers: 2"), Approvers: approvers}})
	model.Push(
		fakeprovider.Reply{ToolCalls: []fakeprovider.ToolCall{{ID: "toolu_1", Name: "run_command", Input: `{"command":"echo two-person-rule"}`}}},
		fakeprovider.Reply{Text: "It ran."})
	top := h.post(slackemu.Post{Channel: general, User: ada, Text: "<@" + botUser + "> run it"})
	card := h.card(top.TS)
	if c := cardText(card); !strings.Contains(c, "2 different people must approve") || !strings.Contains(c, bot.ActionGrant) {
		t.Fatalf("the card does not say two people must approve, or has no grant button: %s", c)
	}
	s := h.session(general, top.TS)

	h.clickCard(card.TS, bot.ActionApprove, ada)
	h.ephemeral(ada, "counted: 1 of 2", 1)
	h.waitFor("the card to show 1 of 2", func() bool {
		c := cardText(h.cards(top.TS)[0])
		return strings.Contains(c, "(1 of 2)") && strings.Contains(c, "<@"+ada+">") && strings.Contains(c, bot.ActionApprove)
	})
	h.clickCard(card.TS, bot.ActionApprove, ada) // the same person again
	h.ephemeral(ada, "already counted (1 of 2)", 1)
	if n := len(h.events(s.ID, session.TypeApprovalDecided)); n != 0 {
		t.Fatalf("%d decisions after one person approved twice", n)
	}
	if n := len(h.events(s.ID, session.TypeToolResult)); n != 0 {
		t.Fatalf("the call ran after one person approved twice")
	}
	votes := h.events(s.ID, session.TypeApprovalVote)
	if len(votes) != 1 || votes[0].Actor.ID != ada || decoded[session.ApprovalVote](t, votes[0]).Count != 1 {
		t.Fatalf("votes %+v; want ada's one", votes)
	}
	refused := h.events(s.ID, session.TypeApprovalRefused)
	if len(refused) != 1 || refused[0].Actor.ID != ada || decoded[session.ApprovalRefused](t, refused[0]).Reason != session.RefusedAlreadyVoted {
		t.Fatalf("refusals %+v; want ada's second click", refused)
	}

	h.clickCard(card.TS, bot.ActionApprove, grace)
	if r := h.toolResult(s.ID, "toolu_1"); r.IsError || !strings.Contains(r.Content, "two-person-rule") {
		t.Fatalf("tool result %+v", r)
	}
	h.answered(s.ID)
	dec := decisionOf(t, h, s.ID)
	p := decoded[session.ApprovalDecided](t, dec)
	if p.Decision != session.DecisionApproved || dec.Actor.ID != grace || !slices.Equal(p.Approvers, []string{ada, grace}) {
		t.Fatalf("decision %+v by %s; want approved by ada and grace", p, dec.Actor.ID)
	}
	if c := cardText(h.cards(top.TS)[0]); !strings.Contains(c, "Approved by <@"+ada+"> and <@"+grace+">") || strings.Contains(c, bot.ActionApprove) {
		t.Fatalf("card after the decision: %s", c)
	}
}

// Two approvers click at once under approvers:2: the first one's "1 of 2" status reaches
// Slack after the second one's decision updated the card. The card still ends showing the
// decision (the status writer reads the log again after writing), never a stale count with
// live buttons.
func TestApprovalCardEndsDecidedWhenTheCountArrivesLate(t *testing.T) {
	t.Parallel()
	approvers, err := bot.ParseApprovers(ada + "," + grace)
	if err != nil {
		t.Fatal(err)
	}
	h, model := modelHarness(t, harnessOptions{approval: bot.ApprovalConfig{Policy: askFor(t, "run_command=ask approvers:2"), Approvers: approvers}})
	model.Push(
		fakeprovider.Reply{ToolCalls: []fakeprovider.ToolCall{{ID: "toolu_1", Name: "run_command", Input: `{"command":"echo late-count"}`}}},
		fakeprovider.Reply{Text: "It ran."})
	top := h.post(slackemu.Post{Channel: general, User: ada, Text: "<@" + botUser + "> run it"})
	card := h.card(top.TS)
	s := h.session(general, top.TS)

	// Ada's status update is held in Slack until Grace's decision has updated the card.
	hold := make(chan struct{})
	updates := h.emu.Calls("chat.update")
	h.emu.InjectMethodFault(slackemu.MethodFault{Method: "chat.update", Hold: hold, Times: 1})
	h.clickCard(card.TS, bot.ActionApprove, ada)
	h.waitFor("ada's status update to reach Slack", func() bool { return h.emu.Calls("chat.update") > updates })
	h.clickCard(card.TS, bot.ActionApprove, grace)
	h.waitFor("the decided card", func() bool {
		return strings.Contains(cardText(h.cards(top.TS)[0]), "Approved by <@"+ada+"> and <@"+grace+">")
	})
	close(hold)
	h.ephemeral(ada, "counted: 1 of 2", 1) // sent once ada's status update and its check are done
	if c := cardText(h.cards(top.TS)[0]); !strings.Contains(c, "Approved by <@"+ada+"> and <@"+grace+">") ||
		strings.Contains(c, "(1 of 2)") || strings.Contains(c, bot.ActionApprove) {
		t.Fatalf("the card after both updates: %s; want the decision, no count and no buttons", c)
	}
	if r := h.toolResult(s.ID, "toolu_1"); r.IsError || !strings.Contains(r.Content, "late-count") {
		t.Fatalf("tool result %+v", r)
	}
	h.answered(s.ID)
}

// Under approvers:2 a deny by one eligible approver denies at once.
func TestApprovalTwoApproversOneDenyDenies(t *testing.T) {
	t.Parallel()
	approvers, _ := bot.ParseApprovers(ada + "," + grace)
	h, model := modelHarness(t, harnessOptions{approval: bot.ApprovalConfig{Policy: askFor(t, "run_command=ask approvers:2"), Approvers: approvers}})
	model.Push(
		fakeprovider.Reply{ToolCalls: []fakeprovider.ToolCall{{ID: "toolu_1", Name: "run_command", Input: `{"command":"echo RAN"}`}}},
		fakeprovider.Reply{Text: "Denied."})
	top := h.post(slackemu.Post{Channel: general, User: ada, Text: "<@" + botUser + "> run it"})
	card := h.card(top.TS)
	h.clickCard(card.TS, bot.ActionApprove, ada)
	h.ephemeral(ada, "counted: 1 of 2", 1)
	h.clickCard(card.TS, bot.ActionDeny, grace)
	s := h.session(general, top.TS)
	if r := h.toolResult(s.ID, "toolu_1"); !r.IsError || strings.Contains(r.Content, "RAN") || !strings.Contains(r.Content, grace) {
		t.Fatalf("tool result %+v; want grace's denial", r)
	}
	h.answered(s.ID)
}

// not_requester: the person whose message started the turn clicks Approve: refused with an
// ephemeral note, recorded with who and why; the card stays open, and someone else decides.
func TestApprovalRequesterClickRefused(t *testing.T) {
	t.Parallel()
	approvers, _ := bot.ParseApprovers(ada + "," + grace)
	h, model := modelHarness(t, harnessOptions{approval: bot.ApprovalConfig{Policy: askFor(t, "run_command=ask not_requester"), Approvers: approvers}})
	model.Push(
		fakeprovider.Reply{ToolCalls: []fakeprovider.ToolCall{{ID: "toolu_1", Name: "run_command", Input: `{"command":"echo separated"}`}}},
		fakeprovider.Reply{ToolCalls: []fakeprovider.ToolCall{{ID: "toolu_2", Name: "run_command", Input: `{"command":"echo RAN"}`}}},
		fakeprovider.Reply{Text: "It ran."})
	top := h.post(slackemu.Post{Channel: general, User: ada, Text: "<@" + botUser + "> run it"})
	card := h.card(top.TS)
	if c := cardText(card); !strings.Contains(c, "<@"+ada+">, who asked, may deny but not approve") {
		t.Fatalf("the card does not say the requester may not decide: %s", c)
	}
	s := h.session(general, top.TS)
	h.clickCard(card.TS, bot.ActionApprove, ada)
	note := h.ephemeral(ada, "not_requester", 1)
	if !strings.Contains(note.Text, "someone else must approve it") {
		t.Fatalf("note %q", note.Text)
	}
	refused := h.events(s.ID, session.TypeApprovalRefused)
	if len(refused) != 1 || refused[0].Actor.ID != ada || refused[0].Actor.Kind != session.ActorUser {
		t.Fatalf("refusals %+v; want ada's click", refused)
	}
	if p := decoded[session.ApprovalRefused](t, refused[0]); p.Reason != session.RefusedRequester || p.Action != "approve" || p.CallID != "toolu_1" {
		t.Fatalf("refusal %+v", p)
	}
	if n := len(h.events(s.ID, session.TypeApprovalDecided)); n != 0 {
		t.Fatalf("%d decisions after the requester's click", n)
	}
	if !strings.Contains(cardText(h.cards(top.TS)[0]), bot.ActionApprove) {
		t.Fatal("the card lost its buttons after a refused click")
	}
	h.clickCard(card.TS, bot.ActionApprove, grace)
	if r := h.toolResult(s.ID, "toolu_1"); r.IsError || !strings.Contains(r.Content, "separated") {
		t.Fatalf("tool result %+v", r)
	}
	// The requester may still deny their own agent's call.
	h.waitFor("a second card", func() bool { return len(h.cards(top.TS)) == 2 })
	h.clickCard(h.cards(top.TS)[1].TS, bot.ActionDeny, ada)
	if r := h.toolResult(s.ID, "toolu_2"); !r.IsError || strings.Contains(r.Content, "RAN") || !strings.Contains(r.Content, ada) {
		t.Fatalf("toolu_2 %+v; want ada's denial", r)
	}
	h.answered(s.ID)
	byCall := map[string]string{}
	for _, e := range h.events(s.ID, session.TypeApprovalDecided) {
		byCall[decoded[session.ApprovalDecided](t, e).CallID] = e.Actor.ID
	}
	if byCall["toolu_1"] != grace || byCall["toolu_2"] != ada {
		t.Fatalf("decisions by %v; want toolu_1 by grace, toolu_2 by ada", byCall)
	}
}

// approvers_in: only the group's members decide (usergroups.users.list on the emulator); when
// Slack cannot say who is in the group, nobody can approve (a note, the card says so, the
// refusal recorded) rather than anyone; once it answers again, a member decides.
func TestApprovalApproversInUserGroup(t *testing.T) {
	t.Parallel()
	h, model := modelHarness(t, harnessOptions{approval: bot.ApprovalConfig{Policy: askFor(t, "run_command=ask approvers_in:S0000001")}})
	h.emu.AddUserGroup(slackemu.UserGroup{ID: "S0000001", Handle: "oncall", Name: "On call", Users: []string{grace}})
	model.Push(
		fakeprovider.Reply{ToolCalls: []fakeprovider.ToolCall{{ID: "toolu_1", Name: "run_command", Input: `{"command":"echo first"}`}}},
		fakeprovider.Reply{ToolCalls: []fakeprovider.ToolCall{{ID: "toolu_2", Name: "run_command", Input: `{"command":"echo second"}`}}},
		fakeprovider.Reply{Text: "Both ran."})
	top := h.post(slackemu.Post{Channel: general, User: ada, Text: "<@" + botUser + "> run them"})
	card := h.card(top.TS)
	if c := cardText(card); !strings.Contains(c, "members of the user group `S0000001`") || strings.Contains(c, "<!subteam") {
		t.Fatalf("the card does not name the group (or pings it): %s", c)
	}
	s := h.session(general, top.TS)
	h.clickCard(card.TS, bot.ActionApprove, ada) // ada asked, but is not in the group
	h.ephemeral(ada, "Only members of the user group `S0000001`", 1)
	h.clickCard(card.TS, bot.ActionApprove, grace) // grace never posted in the thread, but is in the group
	if r := h.toolResult(s.ID, "toolu_1"); r.IsError {
		t.Fatalf("tool result %+v", r)
	}

	h.emu.InjectMethodFault(slackemu.MethodFault{Method: "usergroups.users.list", Error: "plan_upgrade_required"})
	h.waitFor("a second card", func() bool { return len(h.cards(top.TS)) == 2 })
	second := h.cards(top.TS)[1]
	h.clickCard(second.TS, bot.ActionApprove, grace)
	note := h.ephemeral(grace, "I cannot check who is in the user group", 1)
	if !strings.Contains(note.Text, "nobody can approve") || !strings.Contains(note.Text, "plan_upgrade_required") {
		t.Fatalf("note %q", note.Text)
	}
	h.waitFor("the card to say nobody can approve", func() bool {
		c := cardText(h.cards(top.TS)[1])
		return strings.Contains(c, "nobody can approve this call until I can") && strings.Contains(c, bot.ActionApprove)
	})
	if r := h.toolResult(s.ID, "toolu_1"); r.IsError {
		t.Fatal(r)
	}
	for _, e := range h.events(s.ID, session.TypeApprovalDecided) {
		if p := decoded[session.ApprovalDecided](t, e); p.CallID == "toolu_2" {
			t.Fatalf("toolu_2 decided while the group could not be read: %+v", p)
		}
	}
	var reasons []string
	for _, e := range h.events(s.ID, session.TypeApprovalRefused) {
		reasons = append(reasons, e.Actor.ID+":"+decoded[session.ApprovalRefused](t, e).Reason)
	}
	if want := []string{ada + ":" + session.RefusedNotInGroup, grace + ":" + session.RefusedGroupUnknown}; !slices.Equal(reasons, want) {
		t.Fatalf("refusals %v; want %v", reasons, want)
	}

	h.emu.ClearFaults()
	h.clickCard(second.TS, bot.ActionApprove, grace)
	if r := h.toolResult(s.ID, "toolu_2"); r.IsError || !strings.Contains(r.Content, "second") {
		t.Fatalf("tool result %+v", r)
	}
	h.answered(s.ID)
}

// shiftClock is the wall clock moved on by a shift the test sets (while no cell runs), for
// grants' expiry.
type shiftClock struct {
	mu    sync.Mutex
	shift time.Duration
}

func (c *shiftClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Now().Add(c.shift)
}
func (c *shiftClock) After(d time.Duration) <-chan time.Time { return time.After(d) }
func (c *shiftClock) move(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.shift += d
}

// A grant ("Allow for 30 min in this thread") covers later calls of the same tool under the
// same rule in the same thread until it expires, and nothing else: another tool under the
// same rule, the same tool in another thread, and the same call after the expiry each get a
// card again. The grant (scope, expiry, who) and each call it allowed are events, and every
// decision is in the audit export with who made it.
func TestApprovalGrantCoversRuleAndThreadUntilExpiry(t *testing.T) {
	t.Parallel()
	clock := &shiftClock{}
	h, model := modelHarness(t, harnessOptions{clock: clock, idle: 300 * time.Millisecond,
		approval: bot.ApprovalConfig{Policy: askFor(t, "*=ask")}})
	model.Push(
		fakeprovider.Reply{ToolCalls: []fakeprovider.ToolCall{{ID: "toolu_1", Name: "run_command", Input: `{"command":"echo one"}`}}},
		fakeprovider.Reply{ToolCalls: []fakeprovider.ToolCall{{ID: "toolu_2", Name: "run_command", Input: `{"command":"echo two"}`}}},
		fakeprovider.Reply{ToolCalls: []fakeprovider.ToolCall{{ID: "toolu_3", Name: "read_file", Input: `{"path":"x"}`}}},
		fakeprovider.Reply{Text: "done in A"})
	top := h.post(slackemu.Post{Channel: general, User: ada, Text: "<@" + botUser + "> go"})
	a := h.session(general, top.TS)
	first := h.card(top.TS)
	h.clickCard(first.TS, bot.ActionGrant, ada)
	if r := h.toolResult(a.ID, "toolu_2"); r.IsError || !strings.Contains(r.Content, "two") {
		t.Fatalf("toolu_2 (covered by the grant) %+v", r)
	}
	// read_file: the same rule (*=ask), another tool: a card.
	h.waitFor("read_file's card", func() bool { return len(h.cards(top.TS)) == 2 })
	h.clickCard(h.cards(top.TS)[1].TS, bot.ActionApprove, ada)
	h.answered(a.ID)
	if n := len(h.cards(top.TS)); n != 2 {
		t.Fatalf("%d cards in thread A; want 2 (toolu_1, toolu_3)", n)
	}
	grants := h.events(a.ID, session.TypeApprovalGrant)
	if len(grants) != 1 || grants[0].Actor.ID != ada {
		t.Fatalf("grants %+v; want ada's one", grants)
	}
	g := decoded[session.ApprovalGrant](t, grants[0])
	if g.Rule != "*=ask" || g.Tool != "run_command" || g.ThreadTS != top.TS || g.Channel != general || !slices.Equal(g.GrantedBy, []string{ada}) ||
		g.ExpiresAt.Sub(grants[0].CreatedAt) < 29*time.Minute || g.ExpiresAt.Sub(grants[0].CreatedAt) > 31*time.Minute {
		t.Fatalf("grant %+v made at %s", g, grants[0].CreatedAt)
	}
	byCall := map[string]session.Event{}
	for _, e := range h.events(a.ID, session.TypeApprovalDecided) {
		byCall[decoded[session.ApprovalDecided](t, e).CallID] = e
	}
	if p := decoded[session.ApprovalDecided](t, byCall["toolu_1"]); p.Via != "grant" || p.Grant != g.ID || byCall["toolu_1"].Actor.ID != ada {
		t.Fatalf("toolu_1's decision %+v by %s", p, byCall["toolu_1"].Actor.ID)
	}
	if p := decoded[session.ApprovalDecided](t, byCall["toolu_2"]); p.Via != "grant_applied" || p.Grant != g.ID || byCall["toolu_2"].Actor.Kind != session.ActorSystem {
		t.Fatalf("toolu_2's decision %+v by %+v; want the grant's", p, byCall["toolu_2"].Actor)
	}
	if !strings.Contains(cardText(h.cards(top.TS)[0]), "allowed for 30 min in this thread (grant `"+g.ID+"`)") {
		t.Fatalf("the card does not say a grant was made: %s", cardText(h.cards(top.TS)[0]))
	}

	// Another thread: the same tool and rule, a card.
	model.Push(
		fakeprovider.Reply{ToolCalls: []fakeprovider.ToolCall{{ID: "toolu_b1", Name: "run_command", Input: `{"command":"echo b"}`}}},
		fakeprovider.Reply{Text: "done in B"})
	other := h.post(slackemu.Post{Channel: general, User: ada, Text: "<@" + botUser + "> elsewhere"})
	b := h.session(general, other.TS)
	h.clickCard(h.card(other.TS).TS, bot.ActionApprove, ada)
	h.answered(b.ID)
	if p := decoded[session.ApprovalDecided](t, decisionOf(t, h, b.ID)); p.Via != "button" || p.Grant != "" {
		t.Fatalf("thread B's decision %+v", p)
	}

	// After the expiry (the clock moved on while no cell runs): a card again in thread A.
	h.waitFor("the cells to go idle", func() bool { return h.reps[0].runner.Active() == 0 })
	clock.move(31 * time.Minute)
	model.Push(
		fakeprovider.Reply{ToolCalls: []fakeprovider.ToolCall{{ID: "toolu_4", Name: "run_command", Input: `{"command":"echo four"}`}}},
		fakeprovider.Reply{Text: "done again"})
	h.post(slackemu.Post{Channel: general, User: ada, ThreadTS: top.TS, Text: "<@" + botUser + "> once more"})
	h.waitFor("a card after the expiry", func() bool { return len(h.cards(top.TS)) == 3 })
	h.clickCard(h.cards(top.TS)[2].TS, bot.ActionDeny, ada)
	if r := h.toolResult(a.ID, "toolu_4"); !r.IsError {
		t.Fatalf("toolu_4 ran after the grant expired: %+v", r)
	}
	h.answered(a.ID)

	// Every decision is in the export, with who.
	exported := exportEvents(t, h)
	want := map[string]string{ // "type call" -> actor id
		"approval_decided toolu_1": ada, "approval_decided toolu_2": "approval", "approval_decided toolu_3": ada,
		"approval_decided toolu_4": ada, "approval_decided toolu_b1": ada, "approval_grant toolu_1": ada,
	}
	for k, actor := range want {
		if exported[k] != actor {
			t.Errorf("export: %s by %q; want %q (all: %v)", k, exported[k], actor, exported)
		}
	}
}

// exportEvents runs an audit export of the whole log (as `logbook audit export` does, with the
// auditor's role) and returns its approval events as "type call_id" -> actor id.
func exportEvents(t *testing.T, h *harness) map[string]string {
	t.Helper()
	ctx := context.Background()
	pool, err := session.Connect(ctx, h.dbURL, session.PoolOptions{Role: "logbook_auditor"})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	dir := t.TempDir()
	bucket, err := audit.OpenBucket(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer bucket.Close()
	exp := audit.NewExporter(session.NewStore(pool, session.Options{}), pool, audit.ExporterOptions{Settle: time.Millisecond})
	if _, err := exp.Export(ctx, audit.Query{From: time.Now().Add(-time.Hour), To: time.Now().Add(time.Hour)}, bucket, "x"); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(filepath.Join(dir, "x", "events.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]string{}
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var e struct {
			Type    string `json:"type"`
			ActorID string `json:"actor_id"`
			Payload struct {
				CallID string `json:"call_id"`
			} `json:"payload"`
		}
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(e.Type, "approval_") {
			out[e.Type+" "+e.Payload.CallID] = e.ActorID
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// A grant revoked with /logbook grants revoke allows nothing more: the next call in its thread
// gets a card again.
func TestApprovalRevokedGrantAsksAgain(t *testing.T) {
	t.Parallel()
	h, model := modelHarness(t, harnessOptions{approval: bot.ApprovalConfig{Policy: askFor(t, "run_command=ask")}})
	model.Push(
		fakeprovider.Reply{ToolCalls: []fakeprovider.ToolCall{{ID: "toolu_1", Name: "run_command", Input: `{"command":"echo one"}`}}},
		fakeprovider.Reply{Text: "one ran"})
	top := h.post(slackemu.Post{Channel: general, User: ada, Text: "<@" + botUser + "> go"})
	s := h.session(general, top.TS)
	h.clickCard(h.card(top.TS).TS, bot.ActionGrant, ada)
	h.answered(s.ID)
	g := decoded[session.ApprovalGrant](t, h.events(s.ID, session.TypeApprovalGrant)[0])
	if out := grants.Run(context.Background(), h.store, nil, time.Now(), zerolog.Nop(), general, grace, "revoke "+g.ID); !strings.Contains(out, "Only who granted it") {
		t.Fatalf("grace revoked ada's grant: %s", out)
	}
	if out := grants.Run(context.Background(), h.store, nil, time.Now(), zerolog.Nop(), general, ada, "revoke "+g.ID); !strings.Contains(out, "Revoked grant") {
		t.Fatalf("revoke: %s", out)
	}
	model.Push(
		fakeprovider.Reply{ToolCalls: []fakeprovider.ToolCall{{ID: "toolu_2", Name: "run_command", Input: `{"command":"echo two"}`}}},
		fakeprovider.Reply{Text: "two denied"})
	h.post(slackemu.Post{Channel: general, User: ada, ThreadTS: top.TS, Text: "<@" + botUser + "> again"})
	h.waitFor("a card after the revocation", func() bool { return len(h.cards(top.TS)) == 2 })
	h.clickCard(h.cards(top.TS)[1].TS, bot.ActionDeny, ada)
	if r := h.toolResult(s.ID, "toolu_2"); !r.IsError {
		t.Fatalf("toolu_2 ran after its grant was revoked: %+v", r)
	}
	h.answered(s.ID)
}

// beforeAppend is a pgx tracer that runs f once, before the first append of the event types
// typ whose arguments hold mark, is sent: a test puts another writer's append in between a
// reader's check and its own append.
type beforeAppend struct {
	typ, mark string
	once      sync.Once
	f         func()
}

func (b *beforeAppend) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	if len(d.Args) > 4 {
		if types, ok := d.Args[4].([]string); ok && slices.Equal(types, []string{b.typ}) && strings.Contains(fmt.Sprint(d.Args), b.mark) {
			b.once.Do(b.f)
		}
	}
	return ctx
}

func (b *beforeAppend) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// A revocation that lands between the cell's reading of a live grant and its appending the
// decision the grant makes is not missed: the decision is appended only at the head it read,
// so the cell reads again, finds the grant revoked and asks with a card.
func TestApprovalGrantRevokedWhileItIsApplied(t *testing.T) {
	t.Parallel()
	var h *harness
	var s session.Session
	var revoked atomic.Bool
	hook := &beforeAppend{typ: string(session.TypeApprovalDecided), mark: bot.ViaGrantApplied, f: func() {
		g := decoded[session.ApprovalGrant](t, h.events(s.ID, session.TypeApprovalGrant)[0])
		if out := grants.Run(context.Background(), h.store, nil, time.Now(), zerolog.Nop(), general, ada, "revoke "+g.ID); !strings.Contains(out, "Revoked grant") {
			t.Errorf("revoke: %s", out)
		}
		revoked.Store(true)
	}}
	h, model := modelHarness(t, harnessOptions{approval: bot.ApprovalConfig{Policy: askFor(t, "run_command=ask")}, statements: hook})
	model.Push(
		fakeprovider.Reply{ToolCalls: []fakeprovider.ToolCall{{ID: "toolu_1", Name: "run_command", Input: `{"command":"echo one"}`}}},
		fakeprovider.Reply{Text: "one ran"})
	top := h.post(slackemu.Post{Channel: general, User: ada, Text: "<@" + botUser + "> go"})
	s = h.session(general, top.TS)
	h.clickCard(h.card(top.TS).TS, bot.ActionGrant, ada)
	h.answered(s.ID)

	model.Push(
		fakeprovider.Reply{ToolCalls: []fakeprovider.ToolCall{{ID: "toolu_2", Name: "run_command", Input: `{"command":"echo two"}`}}},
		fakeprovider.Reply{Text: "two denied"})
	h.post(slackemu.Post{Channel: general, User: ada, ThreadTS: top.TS, Text: "<@" + botUser + "> again"})
	ran := func() bool {
		for _, e := range h.events(s.ID, session.TypeToolResult) {
			if decoded[session.ToolResult](t, e).CallID == "toolu_2" {
				return true
			}
		}
		return false
	}
	h.waitFor("a card, or the call run", func() bool { return len(h.cards(top.TS)) == 2 || ran() })
	if !revoked.Load() {
		t.Fatal("the grant's decision was never about to be appended: the test tested nothing")
	}
	if ran() {
		t.Fatal("toolu_2 ran under a grant revoked before its decision was appended")
	}
	h.clickCard(h.cards(top.TS)[1].TS, bot.ActionDeny, ada)
	if r := h.toolResult(s.ID, "toolu_2"); !r.IsError {
		t.Fatalf("toolu_2 after the deny: %+v", r)
	}
	h.answered(s.ID)
	for _, e := range h.events(s.ID, session.TypeApprovalDecided) {
		if p := decoded[session.ApprovalDecided](t, e); p.CallID == "toolu_2" && p.Via == bot.ViaGrantApplied {
			t.Errorf("a grant_applied decision of toolu_2 is on the record: %+v", p)
		}
	}
}

// The rule syntax: ask's options, in any order, a space after the colon allowed, written back
// canonically (what a grant is scoped to); the old syntax unchanged; mistakes are errors that
// say what is wrong.
func TestParseToolApprovalDuties(t *testing.T) {
	t.Parallel()
	p := askFor(t, "run_command=ask not_requester approvers: 2, C0000001/write_file=ask approvers_in:S0123ABCD, read_file=allow, *=ask")
	r := p.Rule("C0000001", "run_command")
	if r.Mode != bot.ApprovalAsk || r.Approvers != 2 || !r.NotRequester || r.ApproversIn != "" || r.Text != "run_command=ask approvers:2 not_requester" {
		t.Fatalf("run_command: %+v", r)
	}
	if r := p.Rule("C0000001", "write_file"); r.ApproversIn != "S0123ABCD" || r.Text != "C0000001/write_file=ask approvers_in:S0123ABCD" {
		t.Fatalf("write_file in C0000001: %+v", r)
	}
	if r := p.Rule("C0000002", "write_file"); r.Text != "*=ask" || r.ApproversIn != "" {
		t.Fatalf("write_file elsewhere: %+v", r)
	}
	if p.For("C0000001", "read_file") != bot.ApprovalAllow || p.For("C0000001", "run_command") != bot.ApprovalAsk {
		t.Fatal("For changed meaning")
	}
	for spec, want := range map[string]string{
		"run_command=ask approvers:0":             "1 to 10",
		"run_command=ask approvers:x":             "1 to 10",
		"run_command=ask approvers_in:oncall":     "user group id",
		"run_command=ask twice":                   "no option",
		"run_command=allow not_requester":         "only ask takes options",
		"run_command=ask not_requester:yes":       "takes no value",
		"run_command=ask approvers:2 approvers:3": "given twice",
		"run_command=maybe":                       "allow|ask|deny",
	} {
		if _, err := bot.ParseToolApproval(spec, harnessTools()); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v; want an error saying %q", spec, err, want)
		}
	}
}

// Under not_requester, a person whose message was steered into a running turn is a requester
// of that turn's calls too: the card names everyone whose message the turn took up, and each
// of them is refused (issue 52's review: only the newest author counted).
func TestApprovalSteeredAskerIsARequester(t *testing.T) {
	t.Parallel()
	approvers, _ := bot.ParseApprovers(ada + "," + grace)
	h, model := modelHarness(t, harnessOptions{approval: bot.ApprovalConfig{Policy: askFor(t, "run_command=ask not_requester"), Approvers: approvers}})
	model.Push(
		fakeprovider.Reply{ToolCalls: []fakeprovider.ToolCall{{ID: "toolu_1", Name: "run_command", Input: `{"command":"echo first"}`}}},
		fakeprovider.Reply{ToolCalls: []fakeprovider.ToolCall{{ID: "toolu_2", Name: "run_command", Input: `{"command":"echo second"}`}}},
		fakeprovider.Reply{Text: "second done"})
	top := h.post(slackemu.Post{Channel: general, User: grace, Text: "<@" + botUser + "> run the first"})
	s := h.session(general, top.TS)
	first := h.card(top.TS)
	// While the turn waits for approval, ada asks for something in the thread.
	h.post(slackemu.Post{Channel: general, User: ada, ThreadTS: top.TS, Text: "<@" + botUser + "> now run the dangerous one"})
	h.waitFor("ada's message stored", func() bool { return len(h.events(s.ID, session.TypeUserMessage)) == 2 })
	h.clickCard(first.TS, bot.ActionApprove, ada) // ada approves grace's call
	h.waitFor("the second card", func() bool { return len(h.cards(top.TS)) == 2 })
	var req session.ApprovalRequested
	for _, e := range h.events(s.ID, session.TypeApprovalRequested) {
		if e.Decode(&req) == nil && req.CallID == "toolu_2" {
			break
		}
	}
	if req.CallID != "toolu_2" || !req.AskedBy(ada) || !req.AskedBy(grace) {
		t.Fatalf("the second request %+v: want ada and grace both named as requesters", req)
	}
	second := h.cards(top.TS)[1]
	h.clickCard(second.TS, bot.ActionApprove, ada)
	h.waitFor("ada's click refused", func() bool {
		for _, e := range h.events(s.ID, session.TypeApprovalRefused) {
			var p session.ApprovalRefused
			if e.Decode(&p) == nil && p.CallID == "toolu_2" && e.Actor.ID == ada {
				return true
			}
		}
		return false
	})
	h.clickCard(second.TS, bot.ActionDeny, grace) // a requester may still say no
	if r := h.toolResult(s.ID, "toolu_2"); !r.IsError || strings.Contains(r.Content, "second\n") {
		t.Fatalf("toolu_2 ran though only its requesters clicked: %+v", r)
	}
}

// Under not_requester, a grant never approves its own grantor's calls: grace granted ada's
// rule for 30 minutes, then asks herself in the thread, and a card asks someone else.
func TestApprovalGrantIsNotTheGrantorsOwnApproval(t *testing.T) {
	t.Parallel()
	approvers, _ := bot.ParseApprovers(ada + "," + grace)
	h, model := modelHarness(t, harnessOptions{approval: bot.ApprovalConfig{Policy: askFor(t, "run_command=ask not_requester"), Approvers: approvers}})
	model.Push(
		fakeprovider.Reply{ToolCalls: []fakeprovider.ToolCall{{ID: "toolu_1", Name: "run_command", Input: `{"command":"echo first"}`}}},
		fakeprovider.Reply{Text: "first done"})
	top := h.post(slackemu.Post{Channel: general, User: ada, Text: "<@" + botUser + "> run it"})
	s := h.session(general, top.TS)
	h.clickCard(h.card(top.TS).TS, bot.ActionGrant, grace)
	h.answered(s.ID)
	model.Push(
		fakeprovider.Reply{ToolCalls: []fakeprovider.ToolCall{{ID: "toolu_2", Name: "run_command", Input: `{"command":"echo grace"}`}}},
		fakeprovider.Reply{Text: "second done"})
	h.post(slackemu.Post{Channel: general, User: grace, ThreadTS: top.TS, Text: "<@" + botUser + "> run mine"})
	h.waitFor("a card for grace's call", func() bool { return len(h.cards(top.TS)) == 2 })
	h.clickCard(h.cards(top.TS)[1].TS, bot.ActionApprove, ada)
	if r := h.toolResult(s.ID, "toolu_2"); r.IsError {
		t.Fatalf("toolu_2 after ada approved it: %+v", r)
	}
	for _, e := range h.events(s.ID, session.TypeApprovalDecided) {
		var p session.ApprovalDecided
		if e.Decode(&p) == nil && p.CallID == "toolu_2" && (p.Via == bot.ViaGrantApplied || e.Actor.ID != ada && !slices.Contains(p.Approvers, ada)) {
			t.Fatalf("toolu_2 decided %+v by %s; want ada's click, not grace's grant", p, e.Actor.ID)
		}
	}
	// And a session that used a grant replays identically (the grant's decision is served),
	// once its turn is over: replay checks that it appended nothing, and a live turn still
	// appends.
	h.answered(s.ID)
	if res := h.replayOf(s.ID, replay.Config{Policy: askFor(t, "run_command=ask not_requester")}); !res.Identical() {
		t.Fatalf("replay: %s", res)
	}
}

// A call a grant allowed replays identically under the policy it ran under.
func TestReplayOfACallAGrantAllowed(t *testing.T) {
	t.Parallel()
	policy := askFor(t, "run_command=ask")
	h, model := modelHarness(t, harnessOptions{approval: bot.ApprovalConfig{Policy: policy}})
	model.Push(
		fakeprovider.Reply{ToolCalls: []fakeprovider.ToolCall{{ID: "toolu_1", Name: "run_command", Input: `{"command":"echo one"}`}}},
		fakeprovider.Reply{ToolCalls: []fakeprovider.ToolCall{{ID: "toolu_2", Name: "run_command", Input: `{"command":"echo two"}`}}},
		fakeprovider.Reply{Text: "done"})
	top := h.post(slackemu.Post{Channel: general, User: ada, Text: "<@" + botUser + "> go"})
	s := h.session(general, top.TS)
	h.clickCard(h.card(top.TS).TS, bot.ActionGrant, ada)
	h.answered(s.ID)
	var viaGrant bool
	for _, e := range h.events(s.ID, session.TypeApprovalDecided) {
		viaGrant = viaGrant || thread.Decided(e).Via == bot.ViaGrantApplied
	}
	if !viaGrant {
		t.Fatal("no call was allowed by the grant: the test shows nothing")
	}
	if res := h.replayOf(s.ID, replay.Config{Policy: policy}); !res.Identical() {
		t.Fatalf("replay of a session with a granted call: %s", res)
	}
}
