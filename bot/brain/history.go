package brain

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/logbook/logbook/bot/followup/signal"
	"github.com/logbook/logbook/session"
	"github.com/logbook/logbook/session/clip"
	"github.com/logbook/logbook/session/thread"
)

// purgedNote opens the history of a thread whose earlier events were purged by retention.
const purgedNote = "[Earlier messages of this thread were removed under the workspace's retention policy; " +
	"they are not shown here and cannot be recovered. Answer from what follows, and say so if the question needs them.]"

// interruptedResult is the content of the synthetic tool_result written for a tool_call whose
// outcome is unknown (the process died between the call and its result).
const interruptedResult = "interrupted; outcome unknown"

// history is the conversation rebuilt from the log, ready for a provider.
type history struct {
	Messages []Message
	// Start[i] is the seq of the first event that contributed to Messages[i] (0 for text the
	// harness added, such as a summary).
	Start []int64
	// Boundary[i] is set when Messages[i] begins a turn: a user message opening with the
	// user's text, after an assistant reply with no pending tool calls, that was not held back
	// while an earlier turn ran (its seq is below that turn's reply). Older messages may be
	// cut (summarised) only at a boundary, so a tool_use and its tool_result are kept or
	// dropped together.
	Boundary []bool
	// Content reports whether any user message holds more than a bare mention.
	Content bool
	// Summary is the context_summary in force (its seqs are 0 when there is none).
	Summary session.ContextSummary
}

// historyOptions shape how events become messages.
type historyOptions struct {
	// Through, when > 0, leaves out user messages after this seq: they arrived while the
	// turn ran and are answered by the next turn.
	Through   int64
	BotName   string // display name of the bot, whose leading @mentions are stripped
	BotUserID string // Slack user id of the bot, same
	// Files holds the content of the shared files (the turn's FileReader, read once a Run);
	// nil: files are only named.
	Files *fileCache
	// Sandbox says the turn offers sandbox tools, for the notes on files copied there.
	Sandbox bool
}

// builder accumulates messages.
type builder struct {
	h history
}

func (b *builder) last() *Message {
	if len(b.h.Messages) == 0 {
		return nil
	}
	return &b.h.Messages[len(b.h.Messages)-1]
}

// add appends blocks to the last message when it has role r (and may take them), else opens a
// new message.
func (b *builder) add(r Role, seq int64, boundary bool, blocks ...Block) {
	if len(blocks) == 0 {
		return
	}
	if m := b.last(); m != nil && m.Role == r && !(r == RoleAssistant && hasToolUse(*m)) {
		m.Blocks = append(m.Blocks, blocks...)
		return
	}
	b.h.Messages = append(b.h.Messages, Message{Role: r, Blocks: blocks})
	b.h.Start = append(b.h.Start, seq)
	b.h.Boundary = append(b.h.Boundary, boundary)
}

func hasToolUse(m Message) bool {
	return slices.ContainsFunc(m.Blocks, func(b Block) bool { return b.ToolUse != nil })
}

// buildHistory turns a session's events (oldest first) into provider messages:
//   - the newest context_summary stands in for the events it covers;
//   - the rest is folded by session/thread: a user message shows its newest edit's text,
//     deleted ones are left out, and an edit of a message outside the events (summarised,
//     or never logged) is shown as a note where it happened;
//   - markers (turn_started, title, error, ...) are skipped;
//   - events whose payload retention purged are left out, and a note saying so opens the
//     history (purgedNote);
//   - the order is the turns' order, not raw seq order: a user message that arrived while a
//     turn ran, and was not one that turn answered, follows that turn's reply (see turnOrder);
//   - each assistant message is followed by one user message holding the results of its tool
//     calls in call order (a call without a result gets an in-memory interrupted result; Run
//     appends real ones to the log before it builds), then any user text that arrived meanwhile;
//   - the files shared with a user message (file_ref events with its ts, in order) follow its
//     text: an image or a PDF as an Image or Document block after a line naming it, a text
//     file as a fenced block, anything else — and whatever could not be fetched, loaded or
//     shown — as a note naming it and saying why (see renderFile); the budgets of one request
//     (maxFilesText of text, maxRequestMedia and maxMediaBlocks of media) go to the newest
//     files first;
//   - consecutive messages of one role are merged;
//   - no text block is empty.
//
// The result is normalised (see normalize) but not validated.
func buildHistory(evs []session.Event, opt historyOptions) (history, error) {
	var b builder
	var err error
	if b.h.Summary, err = summaryOf(evs); err != nil {
		return history{}, err
	}
	if s := b.h.Summary; s.ToSeq > 0 {
		b.add(RoleUser, 0, true, Block{Text: fmt.Sprintf(
			"[Summary of the earlier conversation (events %d–%d), written by the harness]\n%s",
			s.FromSeq, s.ToSeq, strings.TrimSpace(s.Summary))})
	}
	recent := evs
	if to := b.h.Summary.ToSeq; to > 0 {
		recent = make([]session.Event, 0, len(evs))
		for _, e := range evs {
			if e.Seq > to {
				recent = append(recent, e)
			}
		}
	}
	th := thread.Fold(recent)
	purged, err := unreadable(th, opt)
	if err != nil {
		return history{}, err
	}
	if purged && b.h.Summary.ToSeq == 0 {
		b.add(RoleUser, 0, true, Block{Text: purgedNote})
	}
	folded := thread.FoldTurns(evs)
	ordered, held, err := turnOrder(folded, th.Items)
	if err != nil {
		return history{}, err
	}
	stops := map[int64]*session.TurnStopped{} // turn_stopped seq -> its payload
	unshown := map[int64]bool{}               // replies of stopped turns: never posted, so never said
	for _, t := range folded.List {
		if t.Stopped != nil {
			stops[t.StoppedSeq] = t.Stopped
			unshown[t.Reply.Seq] = t.Reply.Seq > 0 && !t.Delivered
		}
	}
	files := messageFiles(ordered, sharedFiles(recent), opt)
	names := userNames(th)
	for _, it := range ordered {
		switch it.Kind {
		case thread.KindUser:
			b.user(it, files[it.Seq()], held[it.Seq()], opt)
		case thread.KindAssistant:
			if !unshown[it.Seq()] {
				b.assistant(it, th, opt)
			}
		case thread.KindMarker:
			if ts := stops[it.Seq()]; ts != nil && it.Event.Type == session.TypeTurnStopped {
				b.stopped(it.Seq(), *ts, names)
			}
			if it.Event.Type == session.TypeFollowupSignal && (opt.Through == 0 || it.Seq() <= opt.Through) {
				b.signal(it)
			}
		}
	}
	normalize(&b.h)
	fitToolImages(&b.h)
	return b.h, nil
}

// withPrefix puts the conversation a fork continues (prefix: each ancestor's events through its
// fork's seq, oldest first, each folded by buildHistory under opt) before own, the fork's own
// history. The ancestors' messages are never cut points (Start 0): a summary of the fork takes
// them in whole.
func withPrefix(prefix [][]session.Event, own history, opt historyOptions) (history, error) {
	var all history
	for _, seg := range prefix {
		p, err := buildHistory(seg, opt)
		if err != nil {
			return history{}, fmt.Errorf("the conversation this fork continues: %w", err)
		}
		all.Messages = append(all.Messages, p.Messages...)
		all.Start = append(all.Start, make([]int64, len(p.Messages))...)
		all.Boundary = append(all.Boundary, make([]bool, len(p.Messages))...)
		all.Content = all.Content || p.Content
	}
	all.Messages = append(all.Messages, own.Messages...)
	all.Start = append(all.Start, own.Start...)
	all.Boundary = append(all.Boundary, own.Boundary...)
	all.Content = all.Content || own.Content
	all.Summary = own.Summary
	normalize(&all)
	fitToolImages(&all)
	return all, nil
}

// summaryOf is the newest context_summary of evs that stands in for earlier events (its
// seqs are 0 when there is none).
func summaryOf(evs []session.Event) (session.ContextSummary, error) {
	var sum session.ContextSummary
	for _, e := range evs {
		if e.Type != session.TypeContextSummary || e.Payload == nil { // nil: purged by retention
			continue
		}
		var s session.ContextSummary
		if err := e.Decode(&s); err != nil {
			return session.ContextSummary{}, err
		}
		if s.ToSeq < e.Seq && strings.TrimSpace(s.Summary) != "" {
			sum = s
		}
	}
	return sum, nil
}

// unreadable checks the items the fold could not read: one that retention purged is left
// out (purged: the model is told), any other is an error. A message after opt.Through and a
// title are never shown, readable or not.
func unreadable(th *thread.Thread, opt historyOptions) (purged bool, err error) {
	for _, it := range th.Items {
		if it.Kind != thread.KindUnreadable || it.Event.Type == session.TypeTitle {
			continue
		}
		if it.Event.Type == session.TypeUserMessage && opt.Through > 0 && it.Seq() > opt.Through {
			continue // never shown: it waits for the next turn
		}
		if !errors.Is(it.Err, session.ErrPurged) {
			return false, it.Err
		}
		purged = true
	}
	return purged, nil
}

// user adds a user message of the fold with the files shared with it; held says it was held
// back past an earlier turn's reply (see turnOrder).
func (b *builder) user(it thread.Item, shared []Block, held bool, opt historyOptions) {
	m := it.Message
	if m.Stray {
		if !m.Edited {
			return // a deletion, or an edit of a deleted message
		}
		text, content := renderUser(m.User, "(edited an earlier message to) "+m.Text, opt)
		b.h.Content = b.h.Content || content
		b.add(RoleUser, it.Seq(), false, Block{Text: text})
		return
	}
	if opt.Through > 0 && it.Seq() > opt.Through || m.Deleted {
		return
	}
	text, content := renderUser(speaker(*m.Original), m.Text, opt)
	if !content && len(shared) > 0 {
		text = speaker(*m.Original) + ": (shared " + plural(len(shared), "file") + ")"
	}
	b.h.Content = b.h.Content || content || len(shared) > 0
	// A message held back past a turn's reply is no place to cut: the reply before it
	// has a higher seq, so no summary range could end between them.
	boundary := !held
	if last := b.last(); last != nil && last.Role == RoleUser {
		boundary = false // merged into the message before
	}
	b.add(RoleUser, it.Seq(), boundary, append([]Block{{Text: text}}, shared...)...)
}

// signal adds a signal about a pull request the thread opened (a failed check, a review) as
// the thread's input: GitHub's text framed as untrusted data (followup.Prompt).
func (b *builder) signal(it thread.Item) {
	b.h.Content = true
	boundary := true
	if last := b.last(); last != nil && last.Role == RoleUser {
		boundary = false // merged into the message before
	}
	b.add(RoleUser, it.Seq(), boundary, Block{Text: signal.Prompt(it.Event)})
}

// assistant adds an assistant message of the fold: its text and tool calls, then a user
// message with their results in call order (a call without a result gets an in-memory
// interrupted result).
func (b *builder) assistant(it thread.Item, th *thread.Thread, opt historyOptions) {
	m := it.Assistant
	var blocks []Block
	if strings.TrimSpace(m.Text) != "" {
		blocks = append(blocks, Block{Text: m.Text})
	}
	var resultBlocks []Block
	for _, id := range m.ToolCallIDs {
		tool, ok := th.Call(id)
		if !ok {
			continue // a call that was never recorded cannot be shown; its result is dropped as an orphan
		}
		c := tool.Call
		input := c.Input
		if !json.Valid(input) || len(input) == 0 || input[0] != '{' {
			input = json.RawMessage("{}")
		}
		blocks = append(blocks, Block{ToolUse: &ToolUse{ID: c.CallID, Name: c.Name, Input: input}})
		r := session.ToolResult{CallID: id, Content: interruptedResult, IsError: true}
		if tool.Result != nil {
			r = *tool.Result
		}
		images, notes := resultImages(r, opt.Files)
		content := strings.TrimSpace(r.Content + "\n" + notes)
		if len(images) == 0 {
			content = nonEmpty(content, "(no output)")
		}
		resultBlocks = append(resultBlocks, Block{ToolResult: &ToolResult{
			CallID: id, Content: content, IsError: r.IsError, Images: images,
		}})
	}
	b.add(RoleAssistant, it.Seq(), false, blocks...)
	if len(resultBlocks) > 0 {
		b.h.Messages = append(b.h.Messages, Message{Role: RoleUser, Blocks: resultBlocks})
		b.h.Start = append(b.h.Start, it.Seq())
		b.h.Boundary = append(b.h.Boundary, false)
	}
}

// stopped adds a stopped turn as itself: the text of its stopped model call that the thread
// showed, then a plain note that a named person stopped it, as the assistant's (the turn's
// own tool calls and results are before it, from the log). The next user message is then a
// turn of its own, answered for itself, not merged with the request that was stopped.
func (b *builder) stopped(seq int64, ts session.TurnStopped, names map[string]string) {
	who := nonEmpty(ts.ByName, nonEmpty(names[ts.By], nonEmpty(ts.By, "someone")))
	how := map[string]string{"button": " with Slack's stop button", "reaction": " with the stop reaction", "message": " by writing \"stop\"",
		"stream": " in Slack", "takeover": " by taking the session over"}[ts.Source]
	var blocks []Block
	if strings.TrimSpace(ts.Shown) != "" {
		blocks = append(blocks, Block{Text: ts.Shown})
	}
	blocks = append(blocks, Block{Text: fmt.Sprintf("[%s stopped this turn here%s. What is above is all of it that was written or done; "+
		"it was not finished, and is not to be taken up again unless someone asks. Answer what follows.]", who, how)})
	b.add(RoleAssistant, seq, false, blocks...)
}

// userNames maps the Slack ids of the thread's people to the names their messages were
// stored with.
func userNames(th *thread.Thread) map[string]string {
	names := map[string]string{}
	for _, it := range th.Items {
		if it.Kind != thread.KindUser || it.Message.Original == nil {
			continue
		}
		m := it.Message.Original
		for id, n := range m.Names {
			if strings.TrimSpace(n) != "" {
				names[id] = n
			}
		}
		if strings.TrimSpace(m.UserName) != "" {
			names[m.User] = m.UserName
		}
	}
	return names
}

// messageFiles returns the blocks showing the files shared with each user message ordered
// shows (by the message's seq): shared is the files by message ts (sharedFiles). Messages a
// history leaves out (deleted, or after opt.Through) show no files.
func messageFiles(ordered []thread.Item, shared map[string][]sharedFile, opt historyOptions) map[int64][]Block {
	if len(shared) == 0 {
		return nil
	}
	var views []fileView
	owner := map[int64]int64{} // file_ref seq -> message seq
	for _, it := range ordered {
		if it.Kind != thread.KindUser || it.Message.Stray || it.Message.Deleted || opt.Through > 0 && it.Seq() > opt.Through {
			continue
		}
		m := it.Message
		for _, f := range shared[m.TS] {
			who := speaker(*m.Original)
			if u := f.Ref.User; u != "" && u != m.Original.User {
				who = nonEmpty(m.Names[u], u)
			}
			views = append(views, fileView{sharedFile: f, who: who})
			owner[f.Seq] = it.Seq()
		}
	}
	rendered := renderFiles(views, opt)
	out := map[int64][]Block{}
	for _, v := range views {
		seq := owner[v.Seq]
		out[seq] = append(out[seq], rendered[v.Seq]...)
	}
	return out
}

func plural(n int, what string) string {
	if n == 1 {
		return "a " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

// turnOrder returns items (a fold of the events after the summary) in the order the
// conversation happened for the model: a user message that arrived while a turn ran and is
// not among the messages that turn answers (its seq is above the turn's turn_started Through
// and below the turn's turn_completed) is moved to just after that turn_completed, so it
// follows the turn's reply and never falls between a tool_use and its tool_result.
// Everything else keeps its seq order, held messages among themselves too. held holds the
// seqs of the moved messages. Turns are folded from all of the session's events. A turn without turn_completed
// (the current one, or one that died) moves nothing: the caller's Through leaves out what
// the current turn does not answer, and a turn whose Through is 0 (no limit) answered
// everything.
func turnOrder(folded *thread.Turns, items []thread.Item) (ordered []thread.Item, held map[int64]bool, err error) {
	type span struct{ through, completed int64 }
	if folded.Err != nil {
		return nil, nil, folded.Err
	}
	var turns []span // in turn_started order; Through never decreases
	for _, t := range folded.List {
		if !t.Unread { // a turn_started purged by retention goes with the messages of its turn
			turns = append(turns, span{through: t.Through, completed: t.Completed})
		}
	}
	held = map[int64]bool{}
	if len(turns) == 0 {
		return items, held, nil
	}
	after := map[int64][]thread.Item{} // turn_completed seq -> messages held back until it
	for _, it := range items {
		if it.Kind != thread.KindUser || it.Message.Stray {
			continue
		}
		seq := it.Seq()
		// The last turn whose Through is below the message is the only one that can have
		// been running without answering it: a later turn starts after this one completed and
		// answers every message that arrived before.
		i := sort.Search(len(turns), func(i int) bool { return turns[i].through >= seq }) - 1
		if i >= 0 && turns[i].through > 0 && turns[i].completed > seq {
			after[turns[i].completed] = append(after[turns[i].completed], it)
			held[seq] = true
		}
	}
	if len(held) == 0 {
		return items, held, nil
	}
	ordered = make([]thread.Item, 0, len(items))
	for _, it := range items {
		if it.Kind == thread.KindUser && held[it.Seq()] && !it.Message.Stray {
			continue
		}
		ordered = append(ordered, it)
		if it.Kind == thread.KindMarker && it.Event.Type == session.TypeTurnCompleted {
			ordered = append(ordered, after[it.Seq()]...)
		}
	}
	return ordered, held, nil
}

// speaker is the name a user message is shown with.
func speaker(m session.UserMessage) string {
	return nonEmpty(strings.TrimSpace(m.UserName), nonEmpty(m.User, "someone"))
}

// renderUser returns a user's text as the model sees it, "name: text", with leading mentions
// of the bot removed, and whether anything but a mention was said (a bare mention must never
// become an empty text block, which the model APIs refuse).
func renderUser(name, text string, opt historyOptions) (string, bool) {
	t := strings.TrimSpace(text)
	for {
		before := t
		for _, m := range []string{"@" + opt.BotName, "<@" + opt.BotUserID + ">", "@" + opt.BotUserID} {
			if len(m) > 3 && len(t) >= len(m) && strings.EqualFold(t[:len(m)], m) && wordEnd(t[len(m):]) {
				t = strings.TrimLeft(t[len(m):], " \t\n,:")
			}
		}
		if t == before {
			break
		}
	}
	if t == "" {
		return name + ": (mentioned the bot without any text)", false
	}
	return name + ": " + t, true
}

// wordEnd reports whether rest starts where a mention ends: nothing, or a rune that is not part
// of a name.
func wordEnd(rest string) bool {
	r, _ := utf8.DecodeRuneInString(rest)
	return rest == "" || !(unicode.IsLetter(r) || unicode.IsDigit(r) || r == '_' || r == '-')
}

func nonEmpty(s, alt string) string {
	if strings.TrimSpace(s) == "" {
		return alt
	}
	return s
}

// normalize makes a message list acceptable to the providers without changing what it says:
// tool results that answer no tool use of the message before are dropped (a history cut between
// the two would otherwise be refused), empty
// messages are dropped, messages of one role are merged, and a conversation that would open
// with the assistant opens with a short note from the harness instead.
func normalize(h *history) {
	var out history
	out.Content, out.Summary = h.Content, h.Summary
	for i, m := range h.Messages {
		if m.Role == RoleUser {
			var prevUses map[string]bool
			if n := len(out.Messages); n > 0 && out.Messages[n-1].Role == RoleAssistant {
				prevUses = toolUseIDs(out.Messages[n-1])
			}
			kept := m.Blocks[:0:0]
			for _, b := range m.Blocks {
				if b.ToolResult != nil && !prevUses[b.ToolResult.CallID] {
					continue
				}
				if b.ToolResult == nil && b.ToolUse == nil && b.media() == nil && strings.TrimSpace(b.Text) == "" {
					continue
				}
				kept = append(kept, b)
			}
			m.Blocks = kept
		}
		if len(m.Blocks) == 0 {
			continue
		}
		if n := len(out.Messages); n > 0 && out.Messages[n-1].Role == m.Role && !(m.Role == RoleAssistant && hasToolUse(out.Messages[n-1])) {
			prev := &out.Messages[n-1]
			if m.Role == RoleUser && startsWithResults(m) {
				// Results must lead their message; they can only follow another user message
				// when that message is made of results too, which the builder never produces.
				prev.Blocks = append(m.Blocks, prev.Blocks...)
			} else {
				prev.Blocks = append(prev.Blocks, m.Blocks...)
			}
			continue
		}
		out.Messages = append(out.Messages, m)
		out.Start = append(out.Start, h.Start[i])
		out.Boundary = append(out.Boundary, h.Boundary[i] && m.Role == RoleUser && !startsWithResults(m))
	}
	if len(out.Messages) > 0 && out.Messages[0].Role == RoleAssistant {
		out.Messages = slices.Insert(out.Messages, 0, Message{Role: RoleUser, Blocks: []Block{{Text: "[earlier messages of this thread are not shown]"}}})
		out.Start = slices.Insert(out.Start, 0, 0)
		out.Boundary = slices.Insert(out.Boundary, 0, true)
	}
	*h = out
}

func toolUseIDs(m Message) map[string]bool {
	ids := map[string]bool{}
	for _, b := range m.Blocks {
		if b.ToolUse != nil {
			ids[b.ToolUse.ID] = true
		}
	}
	return ids
}

func startsWithResults(m Message) bool {
	return len(m.Blocks) > 0 && m.Blocks[0].ToolResult != nil
}

// errInvalidHistory is returned by validate for a message list a provider would reject.
var errInvalidHistory = errors.New("invalid model history")

// validate is the pre-send check, so that a history a provider would refuse (a tool_use
// without its tool_result after a crash, a result whose call was cut away) never goes out: the
// first message is the user's and roles alternate; no message is empty and no text block is
// blank; images and documents are in user messages only, with data and a type the providers
// take; every tool_use of an assistant message is answered by a tool_result at the head of the
// next user message, in any order but each exactly once, and every tool_result answers a
// tool_use of the message just before. When wantUserLast is set, the last message must be the
// user's.
func validate(msgs []Message, wantUserLast bool) error {
	if len(msgs) == 0 {
		return fmt.Errorf("%w: no messages", errInvalidHistory)
	}
	if msgs[0].Role != RoleUser {
		return fmt.Errorf("%w: the first message is %s, not user", errInvalidHistory, msgs[0].Role)
	}
	if wantUserLast && msgs[len(msgs)-1].Role != RoleUser {
		return fmt.Errorf("%w: the last message is %s, not user", errInvalidHistory, msgs[len(msgs)-1].Role)
	}
	seen := map[string]bool{}
	for i, m := range msgs {
		if m.Role != RoleUser && m.Role != RoleAssistant {
			return fmt.Errorf("%w: message %d has role %q", errInvalidHistory, i, m.Role)
		}
		if i > 0 && msgs[i-1].Role == m.Role {
			return fmt.Errorf("%w: messages %d and %d are both %s", errInvalidHistory, i-1, i, m.Role)
		}
		if len(m.Blocks) == 0 {
			return fmt.Errorf("%w: message %d is empty", errInvalidHistory, i)
		}
		var pending map[string]bool
		if i > 0 && m.Role == RoleUser {
			pending = toolUseIDs(msgs[i-1])
		}
		inResults := true
		for j, b := range m.Blocks {
			n := 0
			if b.ToolUse != nil {
				n++
			}
			if b.ToolResult != nil {
				n++
			}
			if b.Image != nil {
				n++
			}
			if b.Document != nil {
				n++
			}
			if n > 1 {
				return fmt.Errorf("%w: message %d block %d is two kinds at once", errInvalidHistory, i, j)
			}
			switch {
			case b.ToolUse != nil:
				if m.Role != RoleAssistant {
					return fmt.Errorf("%w: message %d: tool_use in a user message", errInvalidHistory, i)
				}
				if b.ToolUse.ID == "" || seen[b.ToolUse.ID] {
					return fmt.Errorf("%w: message %d: tool_use id %q is empty or repeated", errInvalidHistory, i, b.ToolUse.ID)
				}
				seen[b.ToolUse.ID] = true
			case b.ToolResult != nil:
				if m.Role != RoleUser || !inResults {
					return fmt.Errorf("%w: message %d: tool_result %q is not at the head of a user message", errInvalidHistory, i, b.ToolResult.CallID)
				}
				if !pending[b.ToolResult.CallID] {
					return fmt.Errorf("%w: message %d: tool_result %q answers no tool_use of the message before", errInvalidHistory, i, b.ToolResult.CallID)
				}
				delete(pending, b.ToolResult.CallID)
			case b.media() != nil:
				inResults = false
				md := b.media()
				if m.Role != RoleUser {
					return fmt.Errorf("%w: message %d block %d: an image or document in a %s message", errInvalidHistory, i, j, m.Role)
				}
				if len(md.Data) == 0 {
					return fmt.Errorf("%w: message %d block %d: an image or document without data", errInvalidHistory, i, j)
				}
				if b.Image != nil && !providerImages[md.MediaType] || b.Document != nil && md.MediaType != "application/pdf" {
					return fmt.Errorf("%w: message %d block %d: media type %q is not one the providers take here", errInvalidHistory, i, j, md.MediaType)
				}
			default:
				inResults = false
				if strings.TrimSpace(b.Text) == "" {
					return fmt.Errorf("%w: message %d block %d is an empty text block", errInvalidHistory, i, j)
				}
			}
		}
		if len(pending) > 0 {
			return fmt.Errorf("%w: message %d lacks tool_result for %v", errInvalidHistory, i, sortedKeys(pending))
		}
		if m.Role == RoleAssistant && hasToolUse(m) && i == len(msgs)-1 {
			return fmt.Errorf("%w: the last message has tool_use without tool_result", errInvalidHistory)
		}
	}
	return nil
}

func sortedKeys(m map[string]bool) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// estimateTokens is a rough token count of a request: a quarter of its bytes plus a little per
// block. It is used only to decide when to summarise.
func estimateTokens(system string, msgs []Message, tools []ToolSpec) int {
	n := len(system)
	for _, t := range tools {
		b, _ := json.Marshal(t.Schema)
		n += len(t.Name) + len(t.Description) + len(b)
	}
	blocks := 0
	for _, m := range msgs {
		for _, b := range m.Blocks {
			blocks++
			n += len(b.Text) + 4*mediaTokens(b)
			if b.ToolUse != nil {
				n += len(b.ToolUse.Name) + len(b.ToolUse.Input)
			}
			if b.ToolResult != nil {
				n += len(b.ToolResult.Content) + 4*imageTokens*len(b.ToolResult.Images)
			}
		}
	}
	return n/4 + 4*blocks
}

// cutPoint chooses where to cut a history that is over budget: the earliest turn boundary
// after which the rest fits in target tokens, or failing that the latest boundary. It returns
// 0, false when there is no boundary to cut at (the whole history is the current turn).
func cutPoint(h history, system string, tools []ToolSpec, target int) (int, bool) {
	last := 0
	for i := 1; i < len(h.Messages); i++ {
		if !h.Boundary[i] || h.Start[i] == 0 {
			continue
		}
		last = i
		if estimateTokens(system, h.Messages[i:], tools) <= target {
			return i, true
		}
	}
	return last, last > 0
}

// transcript renders messages as plain text for the summariser; tool outputs are cut to
// maxResult bytes each, and each image or document is a one-line note.
func transcript(msgs []Message, maxResult int) string {
	var sb strings.Builder
	for _, m := range msgs {
		for _, b := range m.Blocks {
			switch {
			case b.ToolUse != nil:
				fmt.Fprintf(&sb, "[assistant called %s %s]\n", b.ToolUse.Name, clip.Text(string(b.ToolUse.Input), maxResult))
			case b.ToolResult != nil:
				status := "result"
				if b.ToolResult.IsError {
					status = "error result"
				}
				fmt.Fprintf(&sb, "[tool %s]\n%s\n", status, clip.Text(b.ToolResult.Content, maxResult))
				if line := imagesLine(b.ToolResult.Images); line != "" {
					sb.WriteString(line + "\n")
				}
			case b.media() != nil:
				// A transcript is text: a summary or title request never carries media.
				sb.WriteString(mediaNote(b) + "\n")
			case m.Role == RoleAssistant:
				fmt.Fprintf(&sb, "assistant: %s\n", b.Text)
			default:
				sb.WriteString(b.Text + "\n")
			}
		}
	}
	return sb.String()
}
