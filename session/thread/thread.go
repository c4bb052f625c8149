// Package thread folds a session's events into the conversation they record: the one place
// where edits, deletions and tool call/result pairing are decided, for every reader (the
// brain's history, the search projection, the transcript). Beside it, [Turns] folds the same
// events into the session's turns (see turns.go): the one reading of turn markers.
//
// A [Thread] holds [Item]s in the order of the events that opened them. User messages show
// their newest edit; a deleted message keeps its place with its text gone (what it said last
// is kept apart, for auditor views). Tool calls carry their result. Every other event is a
// marker item, kept for readers that want turns, titles, deliveries or errors. The fold
// reads only the events it is given: a reader that folds a slice (the events after a
// summary, one page of the log) gets "stray" messages for edits and deletions of messages
// outside that slice, and applies them to what it knows itself.
//
// The rules:
//   - An edit (user_message_edited) replaces the text and raw text of the user message with
//     its orig_ts; of several edits the last one in seq order wins. An edit of a deleted
//     message changes only what the deleted message is remembered to have said.
//   - A deletion (user_message_deleted) empties the message's Text and Raw and sets Deleted;
//     nothing undoes it.
//   - An edit or deletion of a ts the fold has not seen opens a stray message item at its
//     place; later edits and deletions of that ts apply to it, and a user_message with that
//     ts arriving later takes the stray's changes over (the stray item becomes a change).
//   - Who edited is not checked: the gateway never stores bots' edits or deletions.
//   - A tool_result answers the latest tool_call with its call_id that has no result yet;
//     any other result (no such call, a second result) is an item of its own.
//   - An event of a kind the fold reads (user_message, user_message_edited,
//     user_message_deleted, assistant_message, tool_call, tool_result, title) whose payload
//     cannot be decoded, or was purged by retention, is an unreadable item with the error.
package thread

import (
	"strings"

	"github.com/logbook/logbook/session"
)

// Kind says what an item is.
type Kind int

// Kinds of item.
const (
	// KindUser is a user message, or a stray one (Message.Stray) known only from an edit or
	// a deletion of a message outside the folded events.
	KindUser Kind = iota + 1
	// KindAssistant is an assistant_message: a reply, or text with tool calls.
	KindAssistant
	// KindTool is a tool_call with its result, or a tool_result that answers no call
	// (Tool.Call nil).
	KindTool
	// KindChange is an edit or deletion already applied to Items[Target], at its own place
	// in the log.
	KindChange
	// KindMarker is any other event: turns, queued, title, file_ref, delivered, lifecycle,
	// errors, context_summary. Readers of turns use [Turns]; others decode Event themselves.
	KindMarker
	// KindUnreadable is an event the fold needed to read whose payload it could not decode
	// (Err; errors.Is(Err, session.ErrPurged) after a retention purge).
	KindUnreadable
)

// Item is one entry of the conversation.
type Item struct {
	Kind  Kind
	Event session.Event // the event that opened the item

	Message   *Message                  // KindUser
	Assistant *session.AssistantMessage // KindAssistant
	Tool      *Tool                     // KindTool
	Target    int                       // KindChange: the index of the changed message in Items
	Err       error                     // KindUnreadable
}

// Seq is the seq of the event that opened the item.
func (it Item) Seq() int64 { return it.Event.Seq }

// Message is a user message with its edits and deletion applied.
type Message struct {
	TS       string            // the message's Slack ts
	User     string            // Slack user id
	UserName string            // display name when the message was stored; "" for a stray
	Names    map[string]string // Slack id -> display name, captured with the original message
	// Text and Raw are the message as it reads now: the newest edit's text, or the original's;
	// both "" once Deleted.
	Text    string
	Raw     string
	Edited  bool // an edit is applied and the message is not deleted
	Deleted bool
	// DeletedText and DeletedRaw are what a deleted message said last. Only auditor views
	// may show them.
	DeletedText string
	DeletedRaw  string
	// Stray is set when the message itself is not among the folded events: the item was
	// opened by an edit or a deletion of it.
	Stray bool
	// Original is the user_message payload as stored; nil for a stray.
	Original *session.UserMessage

	text, raw string // the newest version, deleted or not
	edited    bool
	changes   []int // indexes of the KindChange items applied to it
}

func (m *Message) settle() {
	m.Edited = m.edited && !m.Deleted
	if m.Deleted {
		m.Text, m.Raw, m.DeletedText, m.DeletedRaw = "", "", m.text, m.raw
		return
	}
	m.Text, m.Raw = m.text, m.raw
}

// Tool is a tool call and its result.
type Tool struct {
	Call        *session.ToolCall   // nil for a result that answers no recorded call
	Result      *session.ToolResult // nil while no result is recorded
	ResultEvent session.Event       // the tool_result event, when Result is set
}

// Thread is a fold of a session's events. The zero value is an empty thread; use Add to fold
// events into it.
type Thread struct {
	Items []Item
	// Title is the newest title event's text, trimmed ("" when there is none).
	Title string

	byTS   map[string]int // user message ts -> item index
	byCall map[string]int // tool call id -> item index of the latest call
}

// Fold folds evs (one session's events in seq order) into a new Thread.
func Fold(evs []session.Event) *Thread {
	t := &Thread{Items: make([]Item, 0, len(evs))}
	t.Add(evs...)
	return t
}

// Message returns the message with ts, stray or not.
func (t *Thread) Message(ts string) (*Message, bool) {
	i, ok := t.byTS[ts]
	if !ok {
		return nil, false
	}
	return t.Items[i].Message, true
}

// Call returns the latest tool call with id and its result.
func (t *Thread) Call(id string) (*Tool, bool) {
	i, ok := t.byCall[id]
	if !ok {
		return nil, false
	}
	return t.Items[i].Tool, true
}

// Add folds more events of the same session, in seq order, after those folded before.
func (t *Thread) Add(evs ...session.Event) {
	if t.byTS == nil {
		t.byTS, t.byCall = map[string]int{}, map[string]int{}
	}
	for _, e := range evs {
		t.add(e)
	}
}

// add folds one event. (Its cases decode a payload and fold it, as Turns' do: the two folds
// read the same log for different things, so they are alike in shape and share decode only.)
func (t *Thread) add(e session.Event) {
	switch e.Type {
	case session.TypeUserMessage:
		var m session.UserMessage
		if !t.decode(e, &m) {
			return
		}
		msg := &Message{TS: m.TS, User: m.User, UserName: m.UserName, Names: m.Names, Original: &m, text: m.Text, raw: m.Raw}
		i := len(t.Items)
		if j, ok := t.byTS[m.TS]; ok && t.Items[j].Message.Stray {
			// Changes logged before their message: the message takes them over, the stray
			// becomes one more change.
			stray := t.Items[j].Message
			if stray.edited {
				msg.text, msg.raw, msg.edited = stray.text, stray.raw, true
			}
			msg.Deleted = stray.Deleted
			msg.changes = append([]int{j}, stray.changes...)
			for _, c := range msg.changes {
				t.Items[c] = Item{Kind: KindChange, Event: t.Items[c].Event, Target: i}
			}
		}
		msg.settle()
		t.byTS[m.TS] = i
		t.Items = append(t.Items, Item{Kind: KindUser, Event: e, Message: msg})
	case session.TypeUserMessageEdited:
		var ed session.UserMessageEdited
		if !t.decode(e, &ed) {
			return
		}
		msg := t.change(e, ed.OrigTS, ed.User)
		msg.text, msg.raw, msg.edited = ed.Text, ed.Raw, true
		msg.settle()
	case session.TypeUserMessageDeleted:
		var d session.UserMessageDeleted
		if !t.decode(e, &d) {
			return
		}
		msg := t.change(e, d.DeletedTS, d.User)
		msg.Deleted = true
		msg.settle()
	case session.TypeAssistantMessage:
		var m session.AssistantMessage
		if !t.decode(e, &m) {
			return
		}
		t.Items = append(t.Items, Item{Kind: KindAssistant, Event: e, Assistant: &m})
	case session.TypeToolCall:
		var c session.ToolCall
		if !t.decode(e, &c) {
			return
		}
		t.byCall[c.CallID] = len(t.Items)
		t.Items = append(t.Items, Item{Kind: KindTool, Event: e, Tool: &Tool{Call: &c}})
	case session.TypeToolResult:
		var r session.ToolResult
		if !t.decode(e, &r) {
			return
		}
		if i, ok := t.byCall[r.CallID]; ok && t.Items[i].Tool.Result == nil {
			t.Items[i].Tool.Result, t.Items[i].Tool.ResultEvent = &r, e
			return
		}
		t.Items = append(t.Items, Item{Kind: KindTool, Event: e, Tool: &Tool{Result: &r, ResultEvent: e}})
	case session.TypeTitle:
		var m session.Title
		if !t.decode(e, &m) {
			return
		}
		t.Title = strings.TrimSpace(m.Text)
		t.Items = append(t.Items, Item{Kind: KindMarker, Event: e})
	default:
		t.Items = append(t.Items, Item{Kind: KindMarker, Event: e})
	}
}

// change returns the message an edit or deletion e of ts applies to, recording e as a change
// of it, or opens a stray message for it.
func (t *Thread) change(e session.Event, ts, user string) *Message {
	if i, ok := t.byTS[ts]; ok {
		msg := t.Items[i].Message
		msg.changes = append(msg.changes, len(t.Items))
		t.Items = append(t.Items, Item{Kind: KindChange, Event: e, Target: i})
		return msg
	}
	msg := &Message{TS: ts, User: user, Stray: true}
	t.byTS[ts] = len(t.Items)
	t.Items = append(t.Items, Item{Kind: KindUser, Event: e, Message: msg})
	return msg
}

func (t *Thread) decode(e session.Event, v any) bool {
	if err := e.Decode(v); err != nil {
		t.Items = append(t.Items, Item{Kind: KindUnreadable, Event: e, Err: err})
		return false
	}
	return true
}
