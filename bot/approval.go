package bot

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/pmezard/go-difflib/difflib"
	"github.com/slack-go/slack"

	"github.com/logbook/logbook/bot/brain"
	"github.com/logbook/logbook/bot/connectors"
	"github.com/logbook/logbook/bot/forge"
	"github.com/logbook/logbook/bot/mrkdwn"
	"github.com/logbook/logbook/session"
	"github.com/logbook/logbook/session/clip"
	"github.com/logbook/logbook/session/slacktext"
	"github.com/logbook/logbook/session/thread"
)

// Approval modes of a tool (LOGBOOK_TOOL_APPROVAL).
const (
	ApprovalAllow = "allow" // the call runs
	ApprovalAsk   = "ask"   // a person in the thread approves or denies it first
	ApprovalDeny  = "deny"  // the call never runs; the model is told so
)

// ToolApproval is the per-tool approval policy, LOGBOOK_TOOL_APPROVAL: comma-separated
// entries tool=mode, where tool is a tool's name or * (every other tool) and mode is allow,
// ask or deny; an entry CHANNEL/tool=mode (a channel id, e.g. C0123ABCD/run_command=allow)
// applies in that channel only and takes precedence. ask may carry options that separate
// duties, separated by spaces (approvalrule.go): approvers:N, not_requester,
// approvers_in:<user group id>. Unset: every tool is allowed.
type ToolApproval struct {
	rules map[string]map[string]Rule // channel ("" for every channel) → tool (or "*") → rule
}

// ParseToolApproval reads a LOGBOOK_TOOL_APPROVAL value; known lists the tool names an entry
// may name (besides *), so that a typo is an error rather than a policy that never applies.
func ParseToolApproval(s string, known []string) (ToolApproval, error) {
	p := ToolApproval{rules: map[string]map[string]Rule{}}
	for _, entry := range strings.Split(s, ",") {
		entry = strings.TrimSpace(entry)
		if entry == "" {
			continue
		}
		key, mode, ok := strings.Cut(entry, "=")
		if !ok {
			return ToolApproval{}, fmt.Errorf("%q: want tool=allow|ask|deny (tool a tool's name or *, optionally CHANNEL/ before it)", entry)
		}
		rule, err := parseMode(mode)
		if err != nil {
			return ToolApproval{}, fmt.Errorf("%q: %w", entry, err)
		}
		channel, tool, scoped := strings.Cut(strings.TrimSpace(key), "/")
		if !scoped {
			channel, tool = "", channel
		}
		if scoped && !slacktext.IsChannelID(channel) {
			return ToolApproval{}, fmt.Errorf("%q: %q is not a channel id (e.g. C0123ABCD)", entry, channel)
		}
		if tool != "*" && !slices.Contains(known, tool) && !connectorPattern(tool) {
			return ToolApproval{}, fmt.Errorf("%q: no tool is named %q (tools: %s, or *)", entry, tool, strings.Join(known, ", "))
		}
		if p.rules[channel] == nil {
			p.rules[channel] = map[string]Rule{}
		}
		rule.Text = strings.TrimSpace(key) + "=" + rule.options()
		p.rules[channel][tool] = rule
	}
	return p, nil
}

// For returns the mode of tool in channel: the channel's entry for the tool, its *, the
// global entry for the tool, the global *, else allow.
func (p ToolApproval) For(channel, tool string) string { return p.Rule(channel, tool).Mode }

// Rule returns the rule that decides tool in channel, chosen as For says (an allow rule
// without Text when no entry matches).
func (p ToolApproval) Rule(channel, tool string) Rule {
	for _, ch := range []string{channel, ""} {
		if r, ok := p.rules[ch][tool]; ok {
			return r
		}
		if r, ok := matchConnector(p.rules[ch], tool); ok {
			return r
		}
		if r, ok := p.rules[ch]["*"]; ok {
			return r
		}
	}
	return Rule{Mode: ApprovalAllow}
}

// Restricts reports whether any tool in any channel is not simply allowed.
func (p ToolApproval) Restricts() bool {
	for _, tools := range p.rules {
		for _, r := range tools {
			if r.Mode != ApprovalAllow {
				return true
			}
		}
	}
	return false
}

// Asks reports whether any tool in any channel needs a person's approval.
func (p ToolApproval) Asks() bool {
	for _, tools := range p.rules {
		for _, r := range tools {
			if r.Mode == ApprovalAsk {
				return true
			}
		}
	}
	return false
}

// Approvers says who may decide an approval card (LOGBOOK_TOOL_APPROVERS, or LOGBOOK_APPROVERS):
// nil users means anyone of this workspace's organisation who has posted in the thread (the
// default); otherwise exactly the listed user ids, whichever organisation they belong to.
//
// People of another organisation (Slack Connect: a click whose user team_id is not the bot's
// team) may talk to the agent — their messages start and continue sessions like anyone's —
// but by default they may not approve its tool calls: the calls run on this organisation's
// sandbox and credentials. Listing their user ids in LOGBOOK_TOOL_APPROVERS lets them.
type Approvers struct{ users []string }

// ParseApprovers reads a LOGBOOK_TOOL_APPROVERS value: empty or "thread" for anyone who has
// posted in the thread, or a comma list of Slack user ids.
func ParseApprovers(s string) (Approvers, error) {
	s = strings.TrimSpace(s)
	if s == "" || strings.EqualFold(s, "thread") {
		return Approvers{}, nil
	}
	var a Approvers
	for _, u := range strings.Split(s, ",") {
		u = strings.TrimSpace(u)
		if u == "" {
			continue
		}
		if len(u) < 2 || (u[0] != 'U' && u[0] != 'W') || strings.ToUpper(u) != u {
			return Approvers{}, fmt.Errorf("%q is not a Slack user id (e.g. U0123ABCD); want a comma list of them, or thread", u)
		}
		a.users = append(a.users, u)
	}
	if len(a.users) == 0 {
		return Approvers{}, errors.New("no user ids; want a comma list of them, or thread")
	}
	return a, nil
}

// may reports whether user may decide in a thread whose events are evs; external says the
// user is of another organisation than the bot's.
func (a Approvers) may(user string, external bool, evs []session.Event) bool {
	if a.users != nil {
		return slices.Contains(a.users, user)
	}
	if external {
		return false
	}
	for _, e := range evs {
		if e.Type == session.TypeUserMessage && e.Actor.Kind == session.ActorUser && e.Actor.ID == user {
			return true
		}
	}
	return false
}

func (a Approvers) describe() string {
	if a.users == nil {
		return "people of this workspace's organisation who have posted in this thread"
	}
	names := make([]string, len(a.users))
	for i, u := range a.users {
		names[i] = "<@" + u + ">"
	}
	return strings.Join(names, ", ")
}

// ApprovalConfig is how tool calls are approved (RunnerConfig.Approval, GatewayConfig.Approvers).
type ApprovalConfig struct {
	Policy    ToolApproval  // LOGBOOK_TOOL_APPROVAL
	Approvers Approvers     // LOGBOOK_TOOL_APPROVERS
	Timeout   time.Duration // LOGBOOK_APPROVAL_TIMEOUT; default 30m: a timeout is a denial
	// Tools is every tool name a policy may name: brain.ToolNames and the parts' tools (nil:
	// brain.ToolNames), for the channels' policies (/logbook config approvals).
	Tools []string
}

// tools is the tool names a channel's policy may name.
func (c ApprovalConfig) tools() []string {
	if c.Tools == nil {
		return brain.ToolNames()
	}
	return c.Tools
}

// Block Kit names of the approval card.
const (
	ApprovalMetadataType = "logbook_approval" // the card's message metadata event_type
	ActionApprove        = "logbook_approve"
	ActionDeny           = "logbook_deny"
	approvalBlock        = "logbook_approval"
)

var approvalActor = session.Actor{Kind: session.ActorSystem, ID: "approval"}

// errSuspended ends a turn whose cell stopped waiting for a decision in memory: the turn
// stays open and turn_suspended is in the log; a decision, a stop or a message wakes the
// session again, on any replica.
var errSuspended = errors.New("turn suspended while waiting for approval")

// approve is the brain's Turn.Approve: the policy's answer, or, for ask, a card in the thread
// and a person's decision. The request is in the log before its card is posted, and the card
// is posted once, whatever happens to cells: a later cell finds the request in the log and
// the card in the thread by its metadata (posting it only when it is not there). The wait is
// the log's: a decision appended by any replica's gateway, the deadline, or a stop. After the
// cell's idle timeout (or on a graceful stop) it suspends the turn instead of waiting on.
func (t *turn) approve(ctx context.Context, use brain.ToolUse) (brain.Decision, error) {
	rule := t.channel.approval.Rule(t.sess.Key.Channel, use.Name)
	if rule.Mode == ApprovalAllow && t.offered.ask(use.Name) {
		// A part has a person approve it (an MCP server's approve patterns).
		rule = Rule{Mode: ApprovalAsk, Text: use.Name + "=ask (its server's approve patterns)"}
	}
	switch mode := rule.Mode; mode {
	case ApprovalAllow:
		return brain.Decision{Allow: true}, nil
	case ApprovalDeny:
		return brain.Decision{Result: PolicyDenial(use.Name, t.channel.own)}, nil
	}
	if dec, ok, err := t.granted(ctx, use, rule); err != nil || ok {
		return dec, err
	}
	if t.live != nil {
		t.live.Status("waiting for approval")
	}
	req, card, err := t.requestApproval(ctx, use, rule)
	if err != nil {
		return brain.Decision{}, err
	}
	t.offered.wait(ctx, true) // a part shows the wait (a code channel's status)
	decided := func() { t.offered.wait(ctx, false) }
	idleAt := t.clock.Now().Add(t.cfg.IdleTimeout)
	for {
		if dec, p, ok := thread.FoldTurns(t.flog.snapshot()).Decision(use.ID); ok {
			defer decided()
			// The card shows the decision even if the gateway's update did not get through
			// (a rate limit, a lost answer): an idempotent chat.update.
			t.deliverer.showDecision(ctx, req, card, dec)
			return decisionFor(dec, p, req), nil
		}
		now := t.clock.Now()
		if !now.Before(req.ExpiresAt) {
			// Nobody decided in time: a denial. Whoever appends first decides (a click that
			// raced the deadline may win); the card then shows what was decided.
			stored, err := t.flog.Append(ctx, session.NewEvent{Type: session.TypeApprovalDecided, Actor: approvalActor,
				IdempotencyKey: session.ApprovalKey(use.ID),
				Payload:        session.ApprovalDecided{CallID: use.ID, Decision: session.DecisionTimeout, Via: "timeout"}})
			if err != nil {
				return brain.Decision{}, err
			}
			if !stored[0].Duplicate {
				t.metrics.approvals.WithLabelValues(session.DecisionTimeout).Inc()
			}
			// The stored decision — the timeout, or a click that won the race — decides.
			dec, p, _ := thread.FoldTurns(stored).Decision(use.ID)
			defer decided()
			t.deliverer.showDecision(ctx, req, card, dec)
			return decisionFor(dec, p, req), nil
		}
		if !now.Before(idleAt) || closed(t.draining) {
			return brain.Decision{}, t.suspend(ctx, req)
		}
		select {
		case <-ctx.Done():
			return brain.Decision{}, ctx.Err()
		case <-t.changed:
		case <-t.clock.After(req.ExpiresAt.Sub(now)):
		case <-t.clock.After(idleAt.Sub(now)):
		case <-t.draining:
		}
	}
}

// requestApproval returns use's request and the ts of its card: recorded and posted now, or
// as an earlier cell left them (the card found by its metadata, posted when it is missing: that
// cell died between the record and the post). A decided request's card is not looked for.
func (t *turn) requestApproval(ctx context.Context, use brain.ToolUse, rule Rule) (session.ApprovalRequested, string, error) {
	link := t.callLink(use.ID)
	folded := thread.FoldTurns(t.flog.snapshot())
	var req session.ApprovalRequested
	decided := ""
	if a, ok := folded.Approval(use.ID); ok {
		req = a.Request
		dec, _, done := folded.Decision(use.ID)
		if done && !unshowable(dec) {
			return req, "", nil
		}
		where := cardPlace(t.sess, req)
		ts, err := t.deliverer.findCard(ctx, where.Key.Channel, where.Key.ThreadTS, use.ID)
		if err != nil || ts != "" {
			return req, ts, err
		}
		if done {
			decided = decidedLine(dec) // the refusal's card, which the cell that recorded it did not post
		}
	} else {
		// The card goes where the turn answers (a code channel's thread, bot/codechannel).
		out := t.out()
		req = session.ApprovalRequested{Turn: t.state.turnSeq, CallID: use.ID, Tool: use.Name,
			Summary: t.approvalSummary(ctx, use), Channel: out.Key.Channel,
			ExpiresAt: t.clock.Now().Add(cmp.Or(t.cfg.Approval.Timeout, 30*time.Minute)),
			Rule:      rule.Text, Approvers: rule.Approvers, NotRequester: rule.NotRequester, ApproversIn: rule.ApproversIn}
		if out.Key != t.sess.Key {
			req.ThreadTS = out.Key.ThreadTS
		}
		if slacktext.IsUserID(t.state.lastUserMsg.User) {
			req.Requester = t.state.lastUserMsg.User
		}
		req.Requesters = t.requesters()
		evs := []session.NewEvent{{Type: session.TypeApprovalRequested, Actor: approvalActor,
			IdempotencyKey: "approval_requested/" + use.ID, Payload: req}}
		if _, hidden := codeBlock(req.Summary, maxSummary); hidden > 0 && link == "" {
			// Nobody can approve what the card cannot show, and there is no page to show it
			// whole: denied at once, in the same append, and the card says why.
			evs = append(evs, session.NewEvent{Type: session.TypeApprovalDecided, Actor: approvalActor,
				IdempotencyKey: session.ApprovalKey(use.ID),
				Payload:        session.ApprovalDecided{CallID: use.ID, Decision: session.DecisionDenied, Via: viaUnshowable}})
		}
		stored, err := t.flog.Append(ctx, evs...)
		if err != nil {
			return req, "", err
		}
		if len(stored) == 2 {
			decided = decidedLine(stored[1])
			t.metrics.approvals.WithLabelValues(session.DecisionDenied).Inc()
			t.log.Warn().Str("tool", use.Name).Str("call_id", use.ID).Int("characters", utf8.RuneCountInString(req.Summary)).
				Msg("tool call denied without asking: its card cannot show it whole and LOGBOOK_PUBLIC_URL is not set")
		}
	}
	ts, err := t.deliverer.postCard(ctx, cardPlace(t.sess, req), req, t.cfg.Approval.Approvers, link, decided)
	if err != nil {
		return req, "", fmt.Errorf("post the approval card for %s: %w", use.ID, err)
	}
	if decided == "" {
		t.log.Info().Str("tool", use.Name).Str("call_id", use.ID).Str("card", ts).Msg("tool call waits for approval")
		t.metrics.approvals.WithLabelValues("requested").Inc()
	}
	return req, ts, nil
}

// viaUnshowable is the Via of a denial made without asking: the call is longer than its card
// can show, and without LOGBOOK_PUBLIC_URL there is no page that shows it whole.
const viaUnshowable = "unshowable"

func unshowable(decision session.Event) bool {
	return thread.Decided(decision).Via == viaUnshowable
}

// callLink is the web page of the session, landing on call's tool call with nothing of it cut
// (?all=1), or "" without LOGBOOK_PUBLIC_URL.
func (t *turn) callLink(call string) string {
	pub := t.cfg.Footer.PublicURL
	if pub == "" {
		return ""
	}
	page := TranscriptURL(pub, t.sess.ID) + "?all=1"
	for _, e := range session.Select(t.flog.snapshot(), session.Range{Types: []session.Type{session.TypeToolCall}}) {
		var p session.ToolCall
		if e.Decode(&p) == nil && p.CallID == call {
			return page + "#e" + strconv.FormatInt(e.Seq, 10)
		}
	}
	return page
}

// suspend ends the cell's wait: the live message says the turn waits, and turn_suspended
// makes the session sleep until something can move it on.
func (t *turn) suspend(ctx context.Context, req session.ApprovalRequested) error {
	var evs []session.NewEvent
	if t.live != nil {
		evs = t.live.stopWith(ctx, "_Waiting for approval…_")
	}
	// Seen: a message the cell has not read by now wakes the session again, as do a decision
	// or a stop appended meanwhile (the trigger looks).
	var seen int64
	if last := session.Select(t.flog.snapshot(), session.Range{Types: []session.Type{session.TypeUserMessage}, Desc: true, Limit: 1}); len(last) == 1 {
		seen = last[0].Seq
	}
	evs = append(evs, session.NewEvent{Type: session.TypeTurnSuspended, Actor: cellActor,
		Payload: session.TurnSuspended{Turn: t.state.turnSeq, CallID: req.CallID, Until: req.ExpiresAt, Seen: seen}})
	if _, err := t.flog.Append(ctx, evs...); err != nil {
		return err
	}
	t.log.Info().Str("call_id", req.CallID).Time("until", req.ExpiresAt).Msg("turn suspended while it waits for approval")
	return errSuspended
}

// cancelApprovals returns the decisions that close the open approval requests of a stopped
// turn (nobody can decide them any more), and a func that shows them on their cards, to call
// once they are stored: a card never says more than the log.
func (t *turn) cancelApprovals(ctx context.Context, by string) ([]session.NewEvent, func(stored []session.Event)) {
	var evs []session.NewEvent
	var reqs []session.ApprovalRequested
	ts, tn := t.turns()
	for _, a := range tn.Approvals {
		req := a.Request
		if _, _, ok := ts.Decision(req.CallID); ok {
			continue
		}
		reqs = append(reqs, req)
		evs = append(evs, session.NewEvent{Type: session.TypeApprovalDecided, Actor: session.Actor{Kind: session.ActorUser, ID: by},
			IdempotencyKey: session.ApprovalKey(req.CallID),
			Payload:        session.ApprovalDecided{CallID: req.CallID, Decision: session.DecisionCanceled, Via: "stop"}})
	}
	return evs, func(stored []session.Event) {
		decided := thread.FoldTurns(stored)
		for _, req := range reqs {
			dec, _, ok := decided.Decision(req.CallID)
			if !ok {
				continue
			}
			if !dec.Duplicate {
				t.metrics.approvals.WithLabelValues(session.DecisionCanceled).Inc()
			}
			where := cardPlace(t.sess, req)
			if card, err := t.deliverer.findCard(ctx, where.Key.Channel, where.Key.ThreadTS, req.CallID); err == nil && card != "" {
				t.deliverer.showDecision(ctx, req, card, dec)
			}
		}
	}
}

// PolicyDenial is the result the model reads for a call of tool that the approvals policy
// denies; own says the channel's own setting denies it, not the deployment's.
func PolicyDenial(tool string, own bool) string {
	by := "the deployment's policy (LOGBOOK_TOOL_APPROVAL)"
	if own {
		by = "this channel's approvals setting (/logbook config approvals)"
	}
	return fmt.Sprintf("%s is not allowed in this channel by %s; the call did not run. Say what you would have done instead.", tool, by)
}

// DecisionFor is what the model is told of a recorded decision e (with its payload p) on the
// request req: what a turn's approval returns, for `logbook replay` to serve from the log.
func DecisionFor(e session.Event, p session.ApprovalDecided, req session.ApprovalRequested) brain.Decision {
	return decisionFor(e, p, req)
}

// decisionFor is what the model is told of a decision (e, with its payload p).
func decisionFor(e session.Event, p session.ApprovalDecided, req session.ApprovalRequested) brain.Decision {
	switch p.Decision {
	case session.DecisionApproved:
		return brain.Decision{Allow: true, Asked: true}
	case session.DecisionTimeout:
		return brain.Decision{Result: fmt.Sprintf("Nobody approved this %s call within the approval timeout, so it did not run (a timeout counts as a denial). Say what you would have done.", req.Tool)}
	case session.DecisionCanceled:
		return brain.Decision{Result: "The turn was stopped before anyone decided; the call did not run."}
	}
	if p.Via == viaUnshowable {
		return brain.Decision{Result: fmt.Sprintf("This %s call did not run and nobody was asked: it is longer than an approval card can show (%d characters), "+
			"and there is no web page to show it whole (LOGBOOK_PUBLIC_URL is not set), so nobody could approve it having seen it. "+
			"Make the call shorter (smaller steps), or say what you would have done.", req.Tool, utf8.RuneCountInString(req.Summary))}
	}
	return brain.Decision{Result: fmt.Sprintf("<@%s> denied this %s call, so it did not run. Say what you would have done, or ask how to go on.", e.Actor.ID, req.Tool)}
}

// maxSummary bounds what a card shows of one call (a section's text holds 3,000 characters).
const maxSummary = 2600

// approvalSummary is exactly what will run, for the card: the command; the path and a
// unified diff for a write (against the file as the sandbox has it now).
func (t *turn) approvalSummary(ctx context.Context, use brain.ToolUse) string {
	var in struct {
		Command string  `json:"command"`
		Path    string  `json:"path"`
		Content *string `json:"content"`
		Query   string  `json:"query"`
	}
	_ = json.Unmarshal(use.Input, &in)
	switch use.Name {
	case brain.ToolRunCommand:
		return "$ " + in.Command
	case brain.ToolWriteFile:
		return "write " + in.Path + "\n" + t.writeDiff(ctx, in.Path, derefOr(in.Content))
	case brain.ToolReadFile:
		return "read " + in.Path
	case brain.ToolSearchSessions:
		return "search past threads for: " + in.Query
	case forge.ToolPullRequest:
		var pr struct{ Branch, Title, Body string }
		_ = json.Unmarshal(use.Input, &pr)
		return "open a pull request from " + pr.Branch + ": " + pr.Title + "\n\n" + pr.Body
	}
	return string(use.Input)
}

// maxDiffInput bounds the files a card diffs (difflib is quadratic at worst); larger writes
// show their size and the new content's beginning.
const maxDiffInput = 64 << 10

// writeDiff shows a write of content to path: a unified diff against the file as the sandbox
// has it. The current file is read only where read_file would be allowed without asking, as
// the card shows it in the channel before anyone approves.
func (t *turn) writeDiff(ctx context.Context, path, content string) string {
	readable := t.channel.approval.For(t.sess.Key.Channel, brain.ToolReadFile) == ApprovalAllow
	old, from := "", "/dev/null"
	switch {
	case !readable:
		return fmt.Sprintf("(the current file is not shown: read_file is not allowed here without approval)\nnew content, %d bytes:\n%s", len(content), content)
	case t.hands == nil || path == "":
	default:
		b, err := t.hands.ReadFile(ctx, path)
		switch {
		case err == nil:
			old, from = string(b), "a/"+path
		case errors.Is(err, fs.ErrNotExist):
		default:
			return fmt.Sprintf("(the current file could not be read: %s)\nnew content, %d bytes:\n%s", clip.Text(err.Error(), 120), len(content), content)
		}
	}
	if len(old) > maxDiffInput || len(content) > maxDiffInput {
		return fmt.Sprintf("(too large to diff: replaces %d bytes with %d bytes)\nnew content begins:\n%s", len(old), len(content), content)
	}
	diff, err := difflib.GetUnifiedDiffString(difflib.UnifiedDiff{A: lines(old), B: lines(content),
		FromFile: from, ToFile: "b/" + path, Context: 3})
	if err != nil || diff == "" {
		return "(no change)"
	}
	return diff
}

// lines splits s into lines that each end in a newline (difflib prints them as they are); a
// last line without one gets one.
func lines(s string) []string {
	if s == "" {
		return nil
	}
	out := strings.SplitAfter(s, "\n")
	if out[len(out)-1] == "" {
		out = out[:len(out)-1]
	} else {
		out[len(out)-1] += "\n"
	}
	return out
}

func derefOr(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// codeBlock shows untrusted text as it is in mrkdwn, in at most max characters, and returns
// how many characters of it (as shownText has them) are left out. The text is shownText'ed
// (nothing invisible, reordering or padding), escaped (no mention, no link can form) and
// unable to close its fence early (a zero-width space splits runs of backticks and ends a
// trailing one), so no line of it can pass for a line of the card; it is cut after escaping,
// never inside an entity.
func codeBlock(s string, max int) (string, int) {
	room := max - 6 // the fences
	var b strings.Builder
	n, prev, hidden := 0, rune(0), 0
	rs := []rune(shownText(s))
	for i, r := range rs {
		piece := mrkdwn.EscapeText(string(r))
		if r == '`' && prev == '`' {
			piece = "\u200b`"
		}
		if w := utf8.RuneCountInString(piece); n+w > room-1 { // room for a closing zero-width space
			hidden = len(rs) - i
			break
		} else {
			n += w
		}
		b.WriteString(piece)
		prev = r
	}
	if prev == '`' {
		b.WriteString("\u200b")
	}
	return "```" + b.String() + "```", hidden
}

// shownText makes untrusted text safe to show as it is: control and format characters
// (bidirectional overrides and isolates, zero-width characters, escapes, carriage returns, line
// and paragraph separators) become visible [U+XXXX] marks, so nothing can reorder, hide or
// overwrite what is shown; a run of more than two empty lines becomes one line saying how many
// there were, so padding cannot push the rest of a call out of sight.
func shownText(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch {
		case r == '\n' || r == '\t':
			b.WriteRune(r)
		case unicode.IsControl(r) || unicode.In(r, unicode.Cf, unicode.Zl, unicode.Zp, unicode.Co, unicode.Cs) || r == utf8.RuneError:
			fmt.Fprintf(&b, "[U+%04X]", r)
		default:
			b.WriteRune(r)
		}
	}
	var out []string
	blank := 0
	flush := func() {
		if blank > 2 {
			out = append(out, fmt.Sprintf("[%d empty lines]", blank))
		} else {
			for range blank {
				out = append(out, "")
			}
		}
		blank = 0
	}
	for _, l := range strings.Split(b.String(), "\n") {
		if strings.TrimSpace(l) == "" {
			blank++
			continue
		}
		flush()
		out = append(out, l)
	}
	flush()
	return strings.Join(out, "\n")
}

// cutNote tells an approver that the card shows only the beginning of the call, how much is
// not shown, and where the whole call is.
func cutNote(hidden int, link string) string {
	if link == "" {
		return fmt.Sprintf(":warning: *The call is cut here:* %s more characters are not shown above. The whole call is in the session's log.", thousands(int64(hidden)))
	}
	return fmt.Sprintf(":warning: *The call is cut here:* %s more characters are not shown above. <%s|Read the whole call> before you decide.", thousands(int64(hidden)), link)
}

// cardBlocks is the approval card: what will run, who may decide, the deadline, and the
// buttons (without them once decided: decided then says who and when).
func cardBlocks(sess session.Session, req session.ApprovalRequested, approvers Approvers, decided, link string) []slack.Block {
	tool := mrkdwn.EscapeText(strings.ReplaceAll(req.Tool, "`", "'"))
	head := fmt.Sprintf("*Approval needed:* I want to use `%s`.", tool)
	if decided != "" {
		head = fmt.Sprintf("*Approval for* `%s`", tool)
	}
	code, hidden := codeBlock(req.Summary, maxSummary)
	blocks := []slack.Block{
		slack.NewSectionBlock(slack.NewTextBlockObject(slack.MarkdownType, head, false, false), nil, nil),
		slack.NewSectionBlock(slack.NewTextBlockObject(slack.MarkdownType, code, false, false), nil, nil),
	}
	if hidden > 0 {
		blocks = append(blocks, slack.NewSectionBlock(slack.NewTextBlockObject(slack.MarkdownType, cutNote(hidden, link), false, false), nil, nil))
	}
	if decided != "" {
		return append(blocks, slack.NewContextBlock("", slack.NewTextBlockObject(slack.MarkdownType, decided, false, false)))
	}
	value := sess.ID.String() + " " + req.CallID
	approve := slack.NewButtonBlockElement(ActionApprove, value, slack.NewTextBlockObject(slack.PlainTextType, "Approve", false, false))
	approve.Style = slack.StylePrimary
	deny := slack.NewButtonBlockElement(ActionDeny, value, slack.NewTextBlockObject(slack.PlainTextType, "Deny", false, false))
	deny.Style = slack.StyleDanger
	buttons := []slack.BlockElement{approve}
	if req.Rule != "" {
		// A grant is scoped to the rule the request names; a request without one (logged
		// before rules were recorded) cannot make one.
		buttons = append(buttons, slack.NewButtonBlockElement(ActionGrant, value,
			slack.NewTextBlockObject(slack.PlainTextType, "Allow for 30 min in this thread", false, false)))
	}
	buttons = append(buttons, deny)
	who := fmt.Sprintf("Who may decide: %s.", whoMayDecide(approvers, req))
	if d := duties(req.Needed(), req.NotRequester, req.ApproversIn, req.Requester); d != "" {
		who += " " + upperFirst(d) + "."
	}
	if req.Rule != "" {
		who += fmt.Sprintf(" *Allow for 30 min* also lets later `%s` calls under the rule `%s` run in this thread without asking for 30 minutes (it needs the same approvals).",
			tool, mrkdwn.EscapeText(strings.ReplaceAll(req.Rule, "`", "'")))
	}
	return append(blocks,
		slack.NewContextBlock("", slack.NewTextBlockObject(slack.MarkdownType, fmt.Sprintf("%s Without a decision by %s, the call is denied.",
			who, slackDate(req.ExpiresAt)), false, false)),
		slack.NewActionBlock(approvalBlock, buttons...))
}

// whoMayDecide says who may decide req under approvers: with a user group, its members (and,
// with a list of approvers, those of them who are listed).
func whoMayDecide(approvers Approvers, req session.ApprovalRequested) string {
	if req.ApproversIn == "" {
		return approvers.describe()
	}
	group := "members of the user group `" + mrkdwn.EscapeText(req.ApproversIn) + "`"
	if approvers.users == nil {
		return group + " of this workspace's organisation"
	}
	return approvers.describe() + ", if they are " + group
}

func upperFirst(s string) string {
	if s == "" {
		return s
	}
	r, n := utf8.DecodeRuneInString(s)
	return string(unicode.ToUpper(r)) + s[n:]
}

// slackDate is t in Slack's date formatting, shown in each reader's time zone.
func slackDate(t time.Time) string {
	return fmt.Sprintf("<!date^%d^{date_short_pretty} {time}|%s>", t.Unix(), t.UTC().Format("2006-01-02 15:04 UTC"))
}

// decidedLine is the card's last line once decision (an approval_decided event) is in the log.
func decidedLine(decision session.Event) string {
	p := thread.Decided(decision)
	when := slackDate(decision.CreatedAt)
	switch p.Decision {
	case session.DecisionApproved:
		switch {
		case p.Via == ViaGrantApplied:
			return fmt.Sprintf(":white_check_mark: Allowed at %s by grant `%s`.", when, mrkdwn.EscapeText(p.Grant))
		case p.Grant != "":
			return fmt.Sprintf(":white_check_mark: Approved by %s at %s, and allowed for 30 min in this thread (grant `%s`): later calls of this tool under the same rule run without asking until then.",
				people(p.Approvers, decision.Actor.ID), when, mrkdwn.EscapeText(p.Grant))
		}
		return fmt.Sprintf(":white_check_mark: Approved by %s at %s.", people(p.Approvers, decision.Actor.ID), when)
	case session.DecisionDenied:
		if p.Via == viaUnshowable {
			return fmt.Sprintf(":no_entry: Not asked, denied at %s: this call is longer than the card can show, and there is no web page "+
				"to show it whole (LOGBOOK_PUBLIC_URL is not set). Nobody can approve what they cannot see.", when)
		}
		return fmt.Sprintf(":no_entry: Denied by <@%s> at %s.", decision.Actor.ID, when)
	case session.DecisionCanceled:
		return fmt.Sprintf(":octagonal_sign: Not decided: the turn was stopped by <@%s> at %s.", decision.Actor.ID, when)
	default:
		return fmt.Sprintf(":hourglass: Nobody decided in time; denied at %s.", when)
	}
}

// postCard posts the approval card in the session's thread, with metadata naming the call so
// a resumed turn finds it.
// decided, when not "", is the card's last line instead of the buttons (a call denied without
// asking); link is the whole call's page ("" for none).
func (d *Deliverer) postCard(ctx context.Context, sess session.Session, req session.ApprovalRequested, approvers Approvers, link, decided string) (string, error) {
	var ts string
	err := d.call(ctx, "chat.postMessage", func() error {
		var err error
		_, ts, err = d.api.PostMessageContext(ctx, sess.Key.Channel,
			slack.MsgOptionTS(sess.Key.ThreadTS),
			slack.MsgOptionText(fmt.Sprintf("Approval needed: %s", req.Tool), false),
			slack.MsgOptionBlocks(cardBlocks(sess, req, approvers, decided, link)...),
			slack.MsgOptionMetadata(slack.SlackMetadata{EventType: ApprovalMetadataType,
				EventPayload: map[string]any{"call_id": req.CallID, "session_id": sess.ID.String()}}))
		return err
	})
	return ts, err
}

// findCard looks for the approval card of call in the thread; "" when it is not there.
func (d *Deliverer) findCard(ctx context.Context, channel, thread, call string) (string, error) {
	var found string
	err := d.call(ctx, "conversations.replies", func() error {
		cursor := ""
		for {
			msgs, more, next, err := d.api.GetConversationRepliesContext(ctx, &slack.GetConversationRepliesParameters{
				ChannelID: channel, Timestamp: thread, Cursor: cursor, Limit: 200, IncludeAllMetadata: true})
			if err != nil {
				return err
			}
			for _, m := range msgs {
				if m.Metadata.EventType == ApprovalMetadataType && m.Metadata.EventPayload["call_id"] == call {
					found = m.Timestamp
					return nil
				}
			}
			if !more || next == "" {
				return nil
			}
			cursor = next
		}
	})
	return found, err
}

// showDecision updates the card of req (the message card) to show the decision, without its
// buttons. Best-effort: the decision is in the log whatever Slack says.
func (d *Deliverer) showDecision(ctx context.Context, req session.ApprovalRequested, card string, decision session.Event) {
	if card == "" {
		return
	}
	if err := d.call(ctx, "chat.update", func() error { return updateCard(ctx, d.api, req, card, decision) }); err != nil {
		d.log.Warn().Err(err).Str("call_id", req.CallID).Msg("could not update the approval card; the decision is in the log")
	}
}

// updateCard makes card, the card of req, show decision (an approval_decided event), without
// buttons.
func updateCard(ctx context.Context, api slackAPI, req session.ApprovalRequested, card string, decision session.Event) error {
	p := thread.Decided(decision)
	_, _, _, err := api.UpdateMessageContext(ctx, req.Channel, card,
		slack.MsgOptionText(fmt.Sprintf("Approval for %s: %s", req.Tool, p.Decision), false),
		slack.MsgOptionBlocks(cardBlocks(session.Session{}, req, Approvers{}, decidedLine(decision), "")...))
	return err
}

// statusBlock is the block_id of an open card's status line: the approvals counted so far, or
// why nobody can decide now.
const statusBlock = "logbook_status"

// statusCard shows status on the open card of req (the message card, whose blocks are
// blocks as the click's payload has them), just above its buttons, replacing an earlier
// status line; the buttons stay.
func statusCard(ctx context.Context, api slackAPI, req session.ApprovalRequested, card string, blocks slack.Blocks, status string) error {
	line := slack.NewContextBlock(statusBlock, slack.NewTextBlockObject(slack.MarkdownType, status, false, false))
	var out []slack.Block
	placed := false
	for _, b := range blocks.BlockSet {
		if b.ID() == statusBlock {
			continue
		}
		if b.ID() == approvalBlock && !placed {
			out, placed = append(out, line), true
		}
		out = append(out, b)
	}
	if !placed {
		return fmt.Errorf("the card of %s has no buttons to show a status above", req.CallID)
	}
	_, _, _, err := api.UpdateMessageContext(ctx, req.Channel, card,
		slack.MsgOptionText(fmt.Sprintf("Approval needed: %s", req.Tool), false), slack.MsgOptionBlocks(out...))
	return err
}

// connectorPattern reports whether an entry of LOGBOOK_TOOL_APPROVAL names connector tools:
// mcp__<server>__<tool>, where a pattern (path.Match syntax, e.g. mcp__sentry__* or mcp__*)
// stands for names the servers give at run time.
func connectorPattern(tool string) bool {
	_, err := path.Match(tool, "")
	return connectors.IsTool(tool) && err == nil
}

// matchConnector is the rule of the most specific pattern of rules that matches a connector
// tool's name (the longest one; an exact name is looked up before); ok false for none.
func matchConnector(rules map[string]Rule, tool string) (Rule, bool) {
	if !connectors.IsTool(tool) {
		return Rule{}, false
	}
	best, found := "", false
	var rule Rule
	for pat, r := range rules {
		ok, _ := path.Match(pat, tool)
		if ok && connectors.IsTool(pat) && (!found || len(pat) > len(best) || len(pat) == len(best) && pat < best) {
			best, rule, found = pat, r, true
		}
	}
	return rule, found
}

// cardPlace is sess as the thread req's card is in: the session's, or the one the request
// names (a thread of the session's code channel).
func cardPlace(sess session.Session, req session.ApprovalRequested) session.Session {
	if req.ThreadTS != "" && req.Channel != "" {
		sess.Key.Channel, sess.Key.ThreadTS = req.Channel, req.ThreadTS
	}
	return sess
}
