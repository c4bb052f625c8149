package session

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Payload shapes of the event types. Every writer and reader of an event type uses these, so a
// payload's JSON field names are as stable as the type names. Times are Slack ts strings
// ("1700000000.000100") where they come from Slack, and milliseconds where they are durations.

// UserMessage is a Slack user's message in a session's thread (type user_message).
type UserMessage struct {
	Team     string `json:"team"`
	Channel  string `json:"channel"`
	ThreadTS string `json:"thread_ts"`
	TS       string `json:"ts"`
	User     string `json:"user"`                // Slack user id
	UserName string `json:"user_name,omitempty"` // display name when the message was stored
	// Text is readable: Slack's escapes decoded, mentions rendered with the display names
	// captured in Names, block-only content flattened. Raw is the text exactly as Slack sent it.
	Text  string            `json:"text"`
	Raw   string            `json:"raw,omitempty"`
	Names map[string]string `json:"names,omitempty"` // Slack id -> display name at store time
	// SlackEventID is the Events API event_id of the delivery that stored the message.
	SlackEventID string `json:"slack_event_id,omitempty"`
	// Mentioned is set when the message mentioned the bot.
	Mentioned bool `json:"mentioned,omitempty"`
	// TraceID and SpanID name the span of the Socket Mode envelope that stored the message,
	// when tracing is on; the turn that answers it links to that span.
	TraceID string `json:"trace_id,omitempty"`
	SpanID  string `json:"span_id,omitempty"`
	// SetBy is, for a message logbook wrote itself (a schedule's tick, actor system
	// schedule/<id>), the person whose setting it runs (the admin who added the schedule).
	SetBy string `json:"set_by,omitempty"`
}

// UserMessageEdited is a later edit of a stored user message (type user_message_edited).
type UserMessageEdited struct {
	OrigTS string `json:"orig_ts"`
	EditTS string `json:"edit_ts,omitempty"`
	User   string `json:"user"`
	Text   string `json:"new_text"`
	Raw    string `json:"raw,omitempty"`
}

// UserMessageDeleted records that a user message was deleted in Slack
// (type user_message_deleted). The original row stays; readers render it as deleted.
type UserMessageDeleted struct {
	DeletedTS string `json:"deleted_ts"`
	User      string `json:"user,omitempty"`
}

// Usage is what one model call cost.
type Usage struct {
	Provider     string `json:"provider"`
	Model        string `json:"model"`
	InputTokens  int64  `json:"input_tokens"`
	OutputTokens int64  `json:"output_tokens"`
	// CacheReadTokens and CacheWriteTokens are the parts of InputTokens read from and written
	// to the provider's prompt cache (priced apart); absent when none.
	CacheReadTokens  int64  `json:"cache_read_tokens,omitempty"`
	CacheWriteTokens int64  `json:"cache_write_tokens,omitempty"`
	StopReason       string `json:"stop_reason,omitempty"`
	LatencyMS        int64  `json:"latency_ms"`
	// Source says where the counts came from. "" (every usage written before the field, and
	// every call that answered) is the provider's report. UsageEstimated is a call that failed
	// after the provider accepted it, whose counts logbook estimated in part (the input from
	// the request sent, the output from what streamed); UsageFromProvider the same call when
	// its stream had carried every count.
	Source string `json:"source,omitempty"`
	// Ended says why a call the provider had accepted ended without its whole answer
	// (CallStopped, CallTimedOut, CallBroken); "" for a call that answered.
	Ended string `json:"ended,omitempty"`
	// RequestHash is the canonical hash of the model request that answered (bot/brain's
	// RequestHash: sha256, hex, of the request's canonical JSON), for `logbook replay` to
	// compare; of the first call when a reply was continued. "" before the field, and for a
	// call that failed.
	RequestHash string `json:"request_hash,omitempty"`
}

// Sources of a Usage's counts (Usage.Source) and of a charge's (Spend.Source).
const (
	UsageFromProvider = "provider" // the provider reported them
	UsageEstimated    = "estimate" // logbook estimated some of them (see bot/brain's partial usage)
	UsageNone         = "none"     // a charge of a call that never reached the model: nothing to count
)

// Why an accepted call ended without its whole answer (Usage.Ended).
const (
	CallStopped  = "stopped"   // its context was cancelled: a person's stop, or the process ending
	CallTimedOut = "timed_out" // a deadline passed: the turn's wall time, the HTTP client's timeout
	CallBroken   = "broken"    // the stream broke: a dropped connection, an error event, no end marker
)

// Estimated reports whether u's counts are in part logbook's estimate, not the provider's.
func (u Usage) Estimated() bool { return u.Source == UsageEstimated }

// AssistantMessage is the model's output for one call (type assistant_message). When
// ToolCallIDs is empty it is a reply for the thread, and delivery posts it; otherwise it is
// the text that accompanied tool calls, and the tool_call events with those ids follow it.
type AssistantMessage struct {
	Text        string   `json:"text"`
	ToolCallIDs []string `json:"tool_call_ids,omitempty"`
	Usage       *Usage   `json:"usage,omitempty"`
	// Turn is the seq of the turn_started marker of the turn that produced it.
	Turn int64 `json:"turn,omitempty"`
	// Own says logbook wrote the text itself, not the model (a canned reply, a turn that ended
	// early): its user mentions are logbook's and stay live. The model's never ping anyone.
	Own bool `json:"own,omitempty"`
}

// Reply reports whether the message is a reply to deliver to the thread.
func (m AssistantMessage) Reply() bool { return len(m.ToolCallIDs) == 0 }

// ToolCall is a tool invocation the model asked for (type tool_call).
type ToolCall struct {
	CallID string          `json:"call_id"`
	Name   string          `json:"name"`
	Input  json.RawMessage `json:"input"`
	// Server and Tool name an MCP connector's server and its own name of the tool, for calls
	// of connector tools (Name mcp__<server>__<tool>); ReadOnly says the server marks the tool
	// read-only (readOnlyHint), so a call the process died in may be made again.
	Server   string `json:"server,omitempty"`
	Tool     string `json:"tool,omitempty"`
	ReadOnly bool   `json:"read_only,omitempty"`
}

// ToolResult is the outcome of a tool call (type tool_result). An error is a result the model
// sees (IsError), never a crash.
type ToolResult struct {
	CallID     string `json:"call_id"`
	Content    string `json:"content"`
	IsError    bool   `json:"is_error,omitempty"`
	Truncated  bool   `json:"truncated,omitempty"`
	ExitCode   *int   `json:"exit_code,omitempty"`
	DurationMS int64  `json:"duration_ms,omitempty"`
	// Synthetic is set on results the harness wrote for calls whose outcome is unknown
	// (a crash between tool_call and tool_result, or a stop while the call ran).
	Synthetic bool `json:"synthetic,omitempty"`
	// Server and Tool name the MCP server and tool of a connector call's result.
	Server string `json:"server,omitempty"`
	Tool   string `json:"tool,omitempty"`
	// StoppedBy is the Slack user whose stop cancelled the call while it ran (a synthetic
	// result written with the turn's turn_stopped): its outcome is unknown, and no crash
	// is to blame.
	StoppedBy string `json:"stopped_by,omitempty"`
	// Images are the images an MCP tool returned, shown to the model as images: their
	// content is kept once in the file store (content-addressed, like shared files, and
	// purged with the session), never inline in the payload.
	Images []ToolImage `json:"images,omitempty"`
}

// ToolImage is an image a tool result carries, by its content address.
type ToolImage struct {
	SHA256    string `json:"sha256"`     // FileHash of the content
	MediaType string `json:"media_type"` // image/png, image/jpeg, image/gif or image/webp
	Size      int64  `json:"size"`       // bytes
}

// Label is how transcripts name the image: "image (png, 12.0 KB)".
func (i ToolImage) Label() string {
	return fmt.Sprintf("image (%s, %s)", strings.TrimPrefix(i.MediaType, "image/"), FileSize(i.Size))
}

// TurnStarted opens a turn (type turn_started). Through is the last user_message seq the
// turn answers.
type TurnStarted struct {
	Through int64  `json:"through"`
	Reason  string `json:"reason,omitempty"` // StartMessage
	// TraceID is the OpenTelemetry trace (hex) of the turn's span, when tracing is on: a
	// transcript links the turn to its trace.
	TraceID string `json:"trace_id,omitempty"`
}

// StartMessage is the Reason of a turn_started that answers new user messages.
const StartMessage = "message"

// TurnCompleted closes a turn (type turn_completed): the tail of a completed exchange.
type TurnCompleted struct {
	// Turn is the seq of the turn_started marker; 0 for a silent turn, whose turn_started is
	// in the same append, just before.
	Turn   int64  `json:"turn"`
	Status string `json:"status"`           // StatusOK, StatusError, StatusSilent or StatusStopped
	Reason string `json:"reason,omitempty"` // why, when not ok: see the statuses
	// Through is the last user_message seq the turn answered; a later user message is work
	// for the next turn.
	Through int64 `json:"through"`
	// TraceID is the trace (hex) of the span that completed the turn, when tracing is on: the
	// turn_started's, or a later cell's that resumed the turn.
	TraceID string `json:"trace_id,omitempty"`
}

// Statuses of TurnCompleted, and the reasons that go with them.
const (
	// StatusOK: the turn's reply was delivered (or the log already recorded its delivery).
	StatusOK = "ok"
	// StatusError: the turn ended early. Its reply says so in a sentence and its Reason is
	// the code of the error event in the log ("wall_time", "http_401", ...), or
	// ReasonDelivery, or ReasonAbandoned.
	StatusError = "error"
	// StatusSilent: nothing the turn took up was for the bot (Reason ReasonNotAddressed); its
	// turn_started is in the same append, just before, and nothing was posted.
	StatusSilent = "silent"
	// StatusStopped: a person stopped the turn (a turn_stopped precedes it); Reason is the
	// stop's source ("button", "reaction", "message", "takeover").
	StatusStopped = "stopped"
)

// Reasons of TurnCompleted that are not an error event's code or a stop's source.
const (
	ReasonNotAddressed = "not_addressed" // StatusSilent
	ReasonDelivery     = "delivery"      // StatusError: the reply could never be posted
	ReasonAbandoned    = "abandoned"     // StatusError: cell after cell took the turn up and none finished it
)

// Queued marks a user message that arrived while a turn ran (type queued); it is answered in
// the next turn.
type Queued struct {
	MessageSeq int64 `json:"message_seq"`
}

// Title is a short generated title of the session (type title).
type Title struct {
	Text string `json:"text"`
}

// FileRef records a file shared in the thread, metadata only (type file_ref).
type FileRef struct {
	FileID    string `json:"file_id"`
	Name      string `json:"name,omitempty"`
	Title     string `json:"title,omitempty"`
	Mimetype  string `json:"mimetype,omitempty"`
	Size      int64  `json:"size,omitempty"` // bytes
	Permalink string `json:"permalink,omitempty"`
	// URL is the file's url_private_download: fetched with the bot token (files:read).
	URL  string `json:"url,omitempty"`
	TS   string `json:"ts"`
	User string `json:"user"`
	// Access is the file's file_access as the message carried it: "check_file_info" (Slack
	// Connect) means the message had no name, type or URL, and files.info has them.
	Access string `json:"file_access,omitempty"`
}

// Delivered records that an assistant_message reached Slack (type delivered).
type Delivered struct {
	EventID string   `json:"event_id"` // the assistant_message's event id
	Seq     int64    `json:"seq"`      // the assistant_message's seq
	Channel string   `json:"channel"`
	TS      []string `json:"ts"` // Slack ts of every posted part, in order
}

// CellWoken records that a cell rehydrated the session (type cell_woken).
type CellWoken struct {
	Host   string `json:"host"`
	PID    int    `json:"pid"`
	Reason string `json:"reason"`
	Epoch  int64  `json:"epoch"`
}

// CellEvicted records that a cell let the session go (type cell_evicted).
type CellEvicted struct {
	Reason string `json:"reason"` // "idle", "backlog", "shutdown", "drain", "suspended", "lease_lost"
}

// SandboxProvisioned records a sandbox provisioned for the session.
type SandboxProvisioned struct {
	Provider   string `json:"provider"`
	Steps      int    `json:"steps"`
	DurationMS int64  `json:"duration_ms"`
	// Repo and Commit: the repository checked out into the workspace (its URL, without
	// credentials) and the commit it is at.
	Repo   string `json:"repo,omitempty"`
	Commit string `json:"commit,omitempty"`
	// Instructions is the repository's instruction file read at provisioning (AGENTS.md, else
	// CLAUDE.md, at the workspace's root), InstructionsHash its sha256 (hex, of the whole
	// file) and InstructionsSize its size in bytes; empty when the checkout has neither.
	Instructions     string `json:"instructions,omitempty"`
	InstructionsHash string `json:"instructions_hash,omitempty"`
	InstructionsSize int    `json:"instructions_size,omitempty"`
}

// TurnSettings is what a turn ran under (type turn_settings, appended before its first model
// call, again when a resumed turn runs under other settings): the channel's effective settings
// (a channel's record, else the environment's default: Set names those from records), the
// repository's instruction file (path and hash; its text is the repository's at the
// sandbox_provisioned commit), and the channel memory notes offered (their ids). Hash is the
// sha256 (hex) of all of it, the same for the same settings. (Its JSON fields, one a line, are
// alike in shape to other records' and to slackemu's Channel: a wire format is written out.)
type TurnSettings struct {
	Turn          int64  `json:"turn"`
	Hash          string `json:"hash"`
	Model         string `json:"model"`
	Instructions  string `json:"instructions,omitempty"`
	Approvals     string `json:"approvals,omitempty"`
	ThreadReplies string `json:"thread_replies,omitempty"`
	DailyBudget   string `json:"daily_budget,omitempty"`
	Setup         string `json:"setup,omitempty"`
	// CanvasOver is the channel's canvas_over when the channel set its own ("": the default):
	// a reply longer than that many characters is shown as a canvas's link (bot/canvas).
	CanvasOver string   `json:"canvas_over,omitempty"`
	Set        []string `json:"set,omitempty"`
	// RepoInstructions and RepoInstructionsHash: the repository's instruction file put in the
	// system prompt (sha256 of what was read, hex), "" without one.
	RepoInstructions     string `json:"repo_instructions,omitempty"`
	RepoInstructionsHash string `json:"repo_instructions_hash,omitempty"`
	// NestedInstructions are the instruction files of directories the agent worked in, as
	// path@sha256.
	NestedInstructions []string `json:"nested_instructions,omitempty"`
	Memory             []int64  `json:"memory,omitempty"`
	// LedgerSeq and LedgerHash are the head of the channel's ledger when the turn read its
	// settings (its seq, and its hash in hex): the changes it ran under are the ledger's events
	// up to it. 0 and "": the channel had no ledger then.
	LedgerSeq  int64  `json:"ledger_seq,omitempty"`
	LedgerHash string `json:"ledger_hash,omitempty"`
}

// SandboxLost records that the session's sandbox was found gone.
type SandboxLost struct {
	Reason string `json:"reason"`
}

// ErrorEvent records a failure that ended or affected a turn (type error). Message is short
// and safe to show; it never holds a secret.
type ErrorEvent struct {
	Stage   string `json:"stage"` // "model", "tool", "delivery", ...
	Code    string `json:"code,omitempty"`
	Message string `json:"message"`
}

// ContextSummary summarises events FromSeq..ToSeq (inclusive) for the model's context
// (type context_summary). The summarised events are never changed.
type ContextSummary struct {
	FromSeq int64  `json:"from_seq"`
	ToSeq   int64  `json:"to_seq"`
	Summary string `json:"summary"`
	// The budget's decision: the history measured Tokens (input tokens) against Budget when
	// it was summarised, measured by Method: "anthropic_count_tokens" (the provider's
	// count-tokens endpoint), "tiktoken_<encoding>" (a local tokenizer) or "estimate" (a
	// quarter of the bytes; also when counting failed). Absent on older summaries.
	Tokens int64  `json:"tokens,omitempty"`
	Budget int64  `json:"budget,omitempty"`
	Method string `json:"method,omitempty"`
}

// DuplicateDelivery records that Slack delivered an already stored message again.
type DuplicateDelivery struct {
	TS           string `json:"ts"`
	SlackEventID string `json:"slack_event_id,omitempty"`
	RetryAttempt int    `json:"retry_attempt,omitempty"`
}

// NotAddressed records that a user message in a session's thread was stored and not answered
// (type not_addressed), and why: "aside" (it starts with (aside) or !aside), "other_person" (it
// mentions someone else and not the bot), "not_mentioned" (the thread answers only mentions),
// "muted" (the thread is muted). The model still sees the message as context next turn.
type NotAddressed struct {
	MessageSeq int64  `json:"message_seq"`
	Reason     string `json:"reason"`
}

// ThreadMuted records that someone muted the bot in the thread (type thread_muted; the actor
// is who did); ThreadUnmuted that someone resumed it (type thread_unmuted).
type ThreadMuted struct {
	MessageSeq int64 `json:"message_seq"`
}

// ThreadUnmuted: see ThreadMuted.
type ThreadUnmuted struct {
	MessageSeq int64 `json:"message_seq"`
}

// StreamStarted records a Slack message a turn began to show live (type stream_started): the
// reply streamed as the model writes it, with a card per tool call. TS is the message's ts;
// Mode is "stream" (chat.startStream) or "update" (chat.postMessage, then chat.update where
// streaming is unavailable). The reply's assistant_message stays the record; the message is
// finished from the log if its cell dies (see bot's doc).
type StreamStarted struct {
	Turn    int64  `json:"turn"`
	Channel string `json:"channel"`
	TS      string `json:"ts"`
	Mode    string `json:"mode"`
}

// StreamStopped records that a live message was finished (type stream_stopped). Reason is
// "done" (the turn's reply completed it), "rollover" (near Slack's age or size limit the turn
// went on in a new message), "recovered" (a later cell stopped it after a crash), or "deleted"
// (a later cell removed a partial message and showed the reply in another). Chars counts the
// text the message shows.
type StreamStopped struct {
	TS     string `json:"ts"`
	Reason string `json:"reason"`
	Chars  int    `json:"chars,omitempty"`
}

// Reasons of StreamStopped.
const (
	StreamDone      = "done"      // the turn's reply completed the message
	StreamRollover  = "rollover"  // the turn went on in a new message
	StreamRecovered = "recovered" // a later cell stopped it after a crash
	StreamDeleted   = "deleted"   // a later cell removed it (the reply is shown in another)
	StreamCutShort  = "stopped"   // finished with a note, no reply follows (a stop, a wait for approval)
)

// StopRequested records that a person asked the running turn to stop (type stop_requested; the
// actor is who asked). Source is "button" (Slack's stop button: agent_session_stopped) or
// "reaction" (the octagonal_sign reaction on any message of the thread) or "message" (a thread
// message that is exactly "stop": its seq is MessageSeq).
type StopRequested struct {
	Source     string `json:"source"`
	MessageSeq int64  `json:"message_seq,omitempty"`
	// UserName is the display name of the person who asked (the actor), when Slack told it.
	UserName string `json:"user_name,omitempty"`
}

// TurnStopped records that a turn was stopped at a person's request (type turn_stopped): the
// model call and the sandbox were cancelled and nothing more was posted. By is the Slack user
// who asked; Request the seq of the stop_requested or "stop" message.
type TurnStopped struct {
	Turn    int64  `json:"turn"`
	By      string `json:"by"`
	Source  string `json:"source"`
	Request int64  `json:"request"`
	// Shown is the text of the stopped model call that the thread showed when the stop came
	// (the live view's; "" when nothing of it was shown): the model's next history has it as
	// the stopped turn's own words.
	Shown string `json:"shown,omitempty"`
	// ByName is By's display name, when known, for the model's note on the stopped turn.
	ByName string `json:"by_name,omitempty"`
}

// Steered records that a user message written while a turn ran was handed to the model at its
// next call inside that turn (type steered), instead of waiting for the next turn.
type Steered struct {
	Turn       int64 `json:"turn"`
	MessageSeq int64 `json:"message_seq"`
}

// ApprovalRequested records that a tool call waits for a person's approval (type
// approval_requested). It is appended before the card is posted in the thread (the card shows
// Summary, exactly what will run, with Approve and Deny buttons; its message metadata names
// CallID, so a later cell finds it instead of posting it again). Past ExpiresAt the call is
// denied (a timeout).
type ApprovalRequested struct {
	Turn    int64  `json:"turn"`
	CallID  string `json:"call_id"`
	Tool    string `json:"tool"`
	Summary string `json:"summary"`
	Channel string `json:"channel"`
	// ThreadTS is the thread the card is posted in when it is not the session's (a thread of
	// the session's code channel, bot/codechannel; Channel is then that channel); "" the
	// session's thread.
	ThreadTS  string    `json:"thread_ts,omitempty"`
	ExpiresAt time.Time `json:"expires_at"`
	// The rule that matched (issue 52), as the policy's canonical text (e.g.
	// "run_command=ask approvers:2 not_requester"), and what it asks of the approvers: how many
	// different people must approve (0 or 1: one), whether Requester (the person whose message
	// started the turn) is kept from deciding, and the Slack user group whose members alone may
	// decide. The click is checked against these, not against the policy of the moment.
	Rule         string `json:"rule,omitempty"`
	Approvers    int    `json:"approvers,omitempty"`
	NotRequester bool   `json:"not_requester,omitempty"`
	ApproversIn  string `json:"approvers_in,omitempty"`
	Requester    string `json:"requester,omitempty"`
	// Requesters are everyone whose message the turn had taken up when it asked (the messages
	// that started it, and those steered or queued into it since): not_requester keeps each of
	// them from approving, since any of them may have asked for the call.
	Requesters []string `json:"requesters,omitempty"`
}

// AskedBy reports whether user is one of the people whose messages the turn that asked r had
// taken up.
func (r ApprovalRequested) AskedBy(user string) bool {
	return user != "" && (user == r.Requester || slices.Contains(r.Requesters, user))
}

// Needed is how many different people must approve the request (at least one).
func (r ApprovalRequested) Needed() int { return max(r.Approvers, 1) }

// Decisions of ApprovalDecided.
const (
	DecisionApproved = "approved"
	DecisionDenied   = "denied"
	DecisionTimeout  = "timeout"  // nobody decided before the deadline: a denial
	DecisionCanceled = "canceled" // the turn ended (stopped) before anyone decided
)

// ApprovalDecided records the decision on an approval request (type approval_decided; the
// actor is the person who decided, or the system for a timeout). The first decision wins: it
// is appended with the idempotency key ApprovalKey(CallID). Via is "button" (the card's
// buttons in Slack), "timeout", "stop", or "unshowable" (denied by the system without asking:
// the call is longer than its card can show and there is no web page to show it whole).
type ApprovalDecided struct {
	CallID   string `json:"call_id"`
	Decision string `json:"decision"`
	Via      string `json:"via"`
	// Approvers are the people whose approvals made the decision, when the rule needed more
	// than one (the actor is the last of them); Grant names the grant (ApprovalGrant.ID) the
	// decision made (Via "grant": every approver chose "Allow for 30 min in this thread") or
	// applied (Via "grant_applied": no card, the actor is the system).
	Approvers []string `json:"approvers,omitempty"`
	Grant     string   `json:"grant,omitempty"`
}

// ApprovalVote records a click that approved a request needing more than one approver and
// did not yet make the decision (type approval_vote; the actor is the person). Count is the
// distinct approvals so far, this one included, of Needed; Grant says the person chose "Allow
// for 30 min in this thread". Its idempotency key is ApprovalVoteKey(CallID, Count): one
// person per place, so two people clicking at once are both counted, one after the other.
type ApprovalVote struct {
	CallID string `json:"call_id"`
	Count  int    `json:"count"`
	Needed int    `json:"needed"`
	Grant  bool   `json:"grant,omitempty"`
}

// ApprovalVoteKey is the idempotency key of the n-th distinct approval of call.
func ApprovalVoteKey(call string, n int) string { return fmt.Sprintf("approval_vote/%s/%d", call, n) }

// Reasons of ApprovalRefused.
const (
	RefusedRequester    = "not_requester"    // the requester clicked a call of their own turn
	RefusedNotInGroup   = "not_in_group"     // the person is not in the rule's approvers_in group
	RefusedGroupUnknown = "group_unreadable" // Slack did not say who is in the group: nobody may decide
	RefusedAlreadyVoted = "already_counted"  // the person's approval is already counted
)

// ApprovalRefused records a click on an approval card that the request's rule refused (type
// approval_refused; the actor is the person who clicked): the request stays open. Action is
// what they clicked ("approve", "deny", "grant"); Detail what Slack said, when it failed.
type ApprovalRefused struct {
	CallID string `json:"call_id"`
	Action string `json:"action"`
	Reason string `json:"reason"`
	Detail string `json:"detail,omitempty"`
}

// ApprovalGrant records a scoped grant (type approval_grant; the actor is the approver whose
// click made it, GrantedBy every approver it needed): until ExpiresAt, a call of Tool that the
// same Rule matches in the same thread (the session) runs without a card, and its
// approval_decided names the grant. It is made with the decision on CallID, in one append,
// under the idempotency key "approval_grant/" + CallID.
type ApprovalGrant struct {
	ID        string    `json:"id"`
	Rule      string    `json:"rule"`
	Tool      string    `json:"tool"`
	Channel   string    `json:"channel"`
	ThreadTS  string    `json:"thread_ts"`
	CallID    string    `json:"call_id"`
	GrantedBy []string  `json:"granted_by"`
	ExpiresAt time.Time `json:"expires_at"`
}

// ApprovalGrantRevoked records that a grant was revoked before it expired (type
// approval_grant_revoked; the actor is who revoked it: a grantor or an admin).
type ApprovalGrantRevoked struct {
	ID string `json:"id"`
}

// ApprovalKey is the idempotency key of the decision on call: whoever appends first decides.
func ApprovalKey(call string) string { return "approval_decided/" + call }

// TurnSuspended records that the cell running a turn stopped waiting for a decision in memory
// and went away (type turn_suspended): the session is not pending work until Until passes, a
// user message after Seen (the last one the cell had read) arrives, or a decision or stop
// request is appended. A decision on CallID or a stop request after Turn already in the log
// when it is appended keeps the session pending.
type TurnSuspended struct {
	Turn   int64     `json:"turn"`
	CallID string    `json:"call_id"`
	Until  time.Time `json:"until"`
	Seen   int64     `json:"seen"`
}

// ToolStarted records that an approved tool call is about to run (type tool_started): a cell
// that takes the turn up later finds its outcome unknown and does not run it again.
type ToolStarted struct {
	CallID string `json:"call_id"`
}

// Statuses of FileFetched.
const (
	FileStored   = "stored"    // the content is stored under SHA256
	FileTooLarge = "too_large" // over the size limit (LOGBOOK_FILE_MAX): not fetched
	FileFailed   = "failed"    // the download failed, retries included (Reason says how)
)

// FileFetched records what became of the content of a file shared in the thread (type
// file_fetched; one per file_ref, by FileID and TS, the message that shared it): stored
// content-addressed (SHA256, hex, so the chain covers the content), or why not. Workspace,
// when set, is where the file was copied in the session's sandbox.
type FileFetched struct {
	FileID    string `json:"file_id"`
	TS        string `json:"ts"`
	Name      string `json:"name"`
	Mimetype  string `json:"mimetype,omitempty"`
	Size      int64  `json:"size"`
	SHA256    string `json:"sha256,omitempty"`
	Status    string `json:"status"`
	Reason    string `json:"reason,omitempty"`
	Attempts  int    `json:"attempts,omitempty"`
	Workspace string `json:"workspace,omitempty"`
	// Kind is what the content is to the model, decided on the bytes: image, pdf, text or
	// other.
	Kind string `json:"kind,omitempty"`
}

// FileUpload records a file the agent handed back (type file_upload): Status "uploaded" once
// its bytes are at Slack under FileID (before it is shared: a later cell finds out from Slack
// whether the share happened), "shared" once it is in the thread (TS, the message). CallID is
// the attach_file call that asked for it.
type FileUpload struct {
	CallID   string `json:"call_id"`
	FileID   string `json:"file_id"`
	Name     string `json:"name"`
	Title    string `json:"title,omitempty"`
	Mimetype string `json:"mimetype,omitempty"`
	Size     int64  `json:"size"`
	SHA256   string `json:"sha256"`
	Status   string `json:"status"`
	TS       string `json:"ts,omitempty"`
}

// PullRequest records a pull request create_pull_request opened, or found already open for the
// branch (type pull_request; Found says which): one per repository and branch, whatever
// retries, crashes or replicas do.
type PullRequest struct {
	CallID string `json:"call_id"`
	Repo   string `json:"repo"` // owner/name
	Branch string `json:"branch"`
	Base   string `json:"base"`
	Number int    `json:"number"`
	URL    string `json:"url"`
	Found  bool   `json:"found,omitempty"`
}

// EgressConnection records one connection the session's sandbox asked its egress proxy for
// (type egress_connection): Kind "connect" (a CONNECT tunnel), "http" (a plain-http request)
// or "git" (a request to the session's repository, which logbook serves with credentials the
// sandbox never holds); the host and port asked for; whether it was allowed (Reason says why
// not, or which git service it was); the bytes each way; for a push, the refs it asked to
// update (Refs) and those the repository reported updated (Pushed): a push is allowed when
// the repository took at least one ref, and Reason says why any other was not taken.
// Records made before Pushed was recorded have none: they prove no push. (Its counters look
// like audit.Manifest's, which is the export's own format.)
type EgressConnection struct {
	Kind       string   `json:"kind"`
	Host       string   `json:"host"`
	Port       int      `json:"port"`
	Allowed    bool     `json:"allowed"`
	Reason     string   `json:"reason,omitempty"`
	BytesOut   int64    `json:"bytes_out"`
	BytesIn    int64    `json:"bytes_in"`
	DurationMS int64    `json:"duration_ms"`
	Refs       []string `json:"refs,omitempty"`
	Pushed     []string `json:"pushed,omitempty"`
}

// WorkSaved records the session's work tree beyond the commit it was checked out at (type
// work_saved), saved after each command or write that may have changed it and when its
// sandbox closed, and put back in the next sandbox: Head and Branch are where HEAD was (its
// commit, its branch or "" when detached); BundleSHA256 the commits made since Commit (a git
// bundle, BundleSize bytes); SHA256 the uncommitted changes against Head (a binary patch,
// Size bytes). Contents are in the file store, by hash. Size 0 and no bundle: nothing beyond
// Commit (or HEAD moved to one of its ancestors). A bundle holds every commit since Commit,
// not only those since the last save.
type WorkSaved struct {
	// Repo is the repository's URL (empty in saves made before it was recorded).
	Repo         string `json:"repo,omitempty"`
	Commit       string `json:"commit"`
	SHA256       string `json:"sha256,omitempty"`
	Size         int64  `json:"size"`
	Head         string `json:"head,omitempty"`
	Branch       string `json:"branch,omitempty"`
	BundleSHA256 string `json:"bundle_sha256,omitempty"`
	BundleSize   int64  `json:"bundle_size,omitempty"`
}

// TakenOver records that a person took the session over (type taken_over; the actor is the
// person): the bot records the thread but answers nothing until handed_back.
type TakenOver struct {
	By string `json:"by"`
}

// HandedBack records that the session was handed back to the bot (type handed_back; the
// actor is who did it). Source is "cli" (logbook handback) or "message" (a thread message
// that is exactly "handback").
type HandedBack struct {
	By     string `json:"by"`
	Source string `json:"source"`
}

// BudgetNotice tells the thread that a daily budget is nearly spent (type budget_notice):
// Scope "channel" or "person", Subject the channel or the person's user id, Day the UTC day
// (YYYY-MM-DD), amounts in millionths of the prices' currency. Text is what the thread was
// told. Its idempotency key makes it once per session, budget and day.
type BudgetNotice struct {
	Scope       string `json:"scope"`
	Subject     string `json:"subject"`
	Day         string `json:"day"`
	SpentMicros int64  `json:"spent_micros"`
	LimitMicros int64  `json:"limit_micros"`
	Text        string `json:"text"`
}

// SetupResult is the outcome of the channel's setup command in a new sandbox (type
// setup_result), recorded like a tool's result: its output (clipped), exit code, and whether
// it failed. Cached says the workspace was taken from an earlier setup on the same commit
// (the command did not run again); Egress is the setup's extra allowlist, open only while it
// ran.
type SetupResult struct {
	Command    string `json:"command"`
	Commit     string `json:"commit,omitempty"`
	ExitCode   int    `json:"exit_code"`
	Output     string `json:"output,omitempty"`
	IsError    bool   `json:"is_error,omitempty"`
	Cached     bool   `json:"cached,omitempty"`
	CacheSHA   string `json:"cache_sha256,omitempty"`
	Egress     string `json:"egress,omitempty"`
	DurationMS int64  `json:"duration_ms"`
}

// ConnectorUnavailable tells the thread that an MCP server offered in its channel could not
// be started or reached, so a turn went without its tools (type connector_unavailable, by
// the connectors): the server, its transport, why (secrets scrubbed), and the line the
// thread was told. Its idempotency key makes it once per session and server.
type ConnectorUnavailable struct {
	Server    string `json:"server"`
	Transport string `json:"transport"`
	Error     string `json:"error"`
	Text      string `json:"text"`
}

// Key is u's idempotency key: one connector_unavailable per session and server.
func (u ConnectorUnavailable) Key() string { return "connector_unavailable:" + u.Server }

// Feedback is a person's click on a reply's 👍 or 👎 button (type feedback, its actor the
// person): the reply's assistant_message event id, Rating FeedbackPositive or
// FeedbackNegative, the Slack message clicked, the model that wrote the reply ("" for
// logbook's own text), and Slack's action_ts of the click. Every click is recorded; a
// person's latest click on a reply is the one counted (Store.Feedback). Its idempotency key
// makes one click delivered twice one event.
type Feedback struct {
	Reply     string `json:"reply"`
	Rating    string `json:"rating"`
	MessageTS string `json:"message_ts"`
	Model     string `json:"model,omitempty"`
	ActionTS  string `json:"action_ts"`
}

// Ratings of Feedback.
const (
	FeedbackPositive = "positive"
	FeedbackNegative = "negative"
)

// Key is f's idempotency key for a click by person: one event per click.
func (f Feedback) Key(person string) string {
	return "feedback:" + f.Reply + ":" + person + ":" + f.ActionTS
}

// CanvasStarted records that a reply (Reply: its assistant_message event id) is about to be
// written as a canvas (type canvas_started), before Slack is asked to create it: Title is the
// canvas's title, which ends with Key, the stable key a later cell looks the canvas up by
// (files.list) when it finds this record without its canvas_written. SHA256 (hex) and Chars
// are the content's.
type CanvasStarted struct {
	Reply   string `json:"reply"`
	Channel string `json:"channel"`
	Title   string `json:"title"`
	Key     string `json:"key"`
	SHA256  string `json:"sha256"`
	Chars   int    `json:"chars"`
}

// IdempotencyKey is c's idempotency key: one canvas_started per reply.
func (c CanvasStarted) IdempotencyKey() string { return "canvas_started:" + c.Reply }

// CanvasWritten records a canvas the agent wrote (type canvas_written), appended before the
// reply that links it is delivered: CanvasID, the channel that may read it, Title, the
// content's SHA256 (hex) and Chars (characters), the reply (its assistant_message event id) it
// holds, its Permalink, and Found when a later cell found it at Slack (created before a crash)
// instead of creating it.
type CanvasWritten struct {
	Reply     string `json:"reply"`
	CanvasID  string `json:"canvas_id"`
	Channel   string `json:"channel"`
	Title     string `json:"title"`
	SHA256    string `json:"sha256"`
	Chars     int    `json:"chars"`
	Permalink string `json:"permalink,omitempty"`
	Found     bool   `json:"found,omitempty"`
}

// IdempotencyKey is c's idempotency key: one canvas_written per reply.
func (c CanvasWritten) IdempotencyKey() string { return "canvas_written:" + c.Reply }

// Key is n's idempotency key: one budget_notice per session, budget and day.
func (n BudgetNotice) Key() string { return "budget_notice:" + n.Scope + ":" + n.Subject + ":" + n.Day }

// MCPToolChanged is a connector's tool whose description changed since the channel's sessions
// first listed it (type mcp_tool_changed): Server as LOGBOOK_MCP_CONFIG names it, Tool the
// server's own name of the tool, Name the one the model calls; Before and After the
// description as the model got it then and gets it now (each at most 1 KiB), with the
// SHA-256 of the whole description the server sent; FirstSeen when the channel first listed
// it. Text is what the thread was told.
type MCPToolChanged struct {
	Server       string    `json:"server"`
	Tool         string    `json:"tool"`
	Name         string    `json:"name"`
	Before       string    `json:"before"`
	After        string    `json:"after"`
	BeforeSHA256 string    `json:"before_sha256"`
	AfterSHA256  string    `json:"after_sha256"`
	FirstSeen    time.Time `json:"first_seen"`
	Text         string    `json:"text"`
}

// Key is c's idempotency key: one record of a change per session.
func (c MCPToolChanged) Key() string {
	return "mcp_tool_changed:" + c.Server + ":" + c.Tool + ":" + c.AfterSHA256
}

// SessionForked is the first event of a fork (type session_forked, by the person who
// branched, or the system for `logbook fork` run by an operator): the session it was branched
// from, the seq of the parent's event it was taken at and that event's hash (hex), so the
// reference verifies against the parent's chain even after retention purged the parent's
// payloads. ParentChannel and ParentThreadTS say where the parent's thread is; At is the
// Slack ts of the message it was branched from ("" from the command line). The fork copies
// none of the parent's events: its history reads them from the parent's log.
type SessionForked struct {
	Parent         ID     `json:"parent"`
	Seq            int64  `json:"seq"`
	Hash           string `json:"hash"`
	ParentChannel  string `json:"parent_channel"`
	ParentThreadTS string `json:"parent_thread_ts"`
	At             string `json:"at,omitempty"`
	By             string `json:"by,omitempty"`
}

// Key is f's idempotency key: one session_forked per session.
func (f SessionForked) Key() string { return "session_forked" }

// ReviewRequested starts (or starts again, after a push) the review of a pull request in a
// session (type review_requested, by bot/review): the repository, the pull request and its
// link, the head commit reviewed, the head reviewed before it in the session (Since: "" on a
// first review; then only what changed since is in scope), the changed lines in scope, and
// who asked (a Slack user, or the GitHub event that started it).
type ReviewRequested struct {
	Repo   string        `json:"repo"` // owner/name
	Number int           `json:"number"`
	URL    string        `json:"url"`
	Head   string        `json:"head"`
	Since  string        `json:"since,omitempty"`
	Scope  []ReviewScope `json:"scope"`
	By     string        `json:"by,omitempty"`
	// Dismissed are the fingerprints of findings a person dismissed on the pull request
	// when the review started: they are not raised again.
	Dismissed []string `json:"dismissed,omitempty"`
}

// ReviewScope is one file in a review's scope and the lines of its new version that the
// diff's hunks cover, as [first, last] ranges.
type ReviewScope struct {
	Path  string   `json:"path"`
	Lines [][2]int `json:"lines"`
}

// ReviewFinding is one finding of a review (type review_finding), recorded when the agent
// calls review_finding, before anything is posted: the file, the line of its new version, the
// severity and why it was flagged, and its fingerprint (path and reason: the same finding on
// a later head). Dropped says why it will not be posted (outside the changed lines, dismissed
// on GitHub before); "" it will be.
type ReviewFinding struct {
	CallID      string `json:"call_id"`
	Repo        string `json:"repo"`
	Number      int    `json:"number"`
	Head        string `json:"head"`
	Path        string `json:"path"`
	Line        int    `json:"line"`
	Severity    string `json:"severity"`
	Reason      string `json:"reason"`
	Fingerprint string `json:"fingerprint"`
	Dropped     string `json:"dropped,omitempty"`
}

// ReviewPosting is a review about to be posted (type review_posting): the pull request, its
// head, the event (COMMENT, APPROVE) and the marker its body carries, by which a later cell
// finds it on GitHub when the post's answer was lost.
type ReviewPosting struct {
	CallID string `json:"call_id"`
	Repo   string `json:"repo"`
	Number int    `json:"number"`
	Head   string `json:"head"`
	Event  string `json:"event"`
	Marker string `json:"marker"`
}

// ReviewPosted is a review posted on GitHub (type review_posted; once per pull request and
// head, its idempotency key): its id and link, the inline comments it carries, the summary,
// and Found when it was found there (an earlier attempt's post) rather than posted now.
type ReviewPosted struct {
	CallID   string `json:"call_id"`
	Repo     string `json:"repo"`
	Number   int    `json:"number"`
	Head     string `json:"head"`
	Event    string `json:"event"`
	ReviewID int64  `json:"review_id"`
	URL      string `json:"url"`
	Comments int    `json:"comments"`
	Summary  string `json:"summary"`
	Found    bool   `json:"found,omitempty"`
}

// Key is p's idempotency key: one review_posted per pull request and head commit.
func (p ReviewPosted) Key() string {
	return "review_posted:" + p.Repo + "#" + strconv.Itoa(p.Number) + "@" + p.Head
}

// ReplayStarted is the first event of an eval record (a session of kind replay; type
// replay_started, by the operator's actor): the original session, the seq of the user message
// the what-if ran from and that event's hash (hex), so the link verifies against the
// original's chain as a fork's reference does; the original turn it ran again (the seq of its
// turn_started) and the settings it ran under. Instructions is the text that replaced the
// channel's instructions ("" when they were kept as recorded), AgentsMD the text that replaced
// the repository's instruction file; Tools how tool calls were served ("recorded": a call
// identical to a recorded one gets its recorded result, any other is refused; "sandbox": any
// other call of the sandbox's tools runs in a fresh sandbox restored to that point, with no
// network); Sandbox, in mode "sandbox", what those calls ran in, or why there was none (they
// were refused). What the sandbox did is on the eval record's own chain (sandbox_provisioned,
// work_saved), never on the original's.
type ReplayStarted struct {
	Original         ID     `json:"original"`
	Seq              int64  `json:"seq"`
	Hash             string `json:"hash"`
	OriginalChannel  string `json:"original_channel"`
	OriginalThreadTS string `json:"original_thread_ts"`
	Turn             int64  `json:"turn"`
	Model            string `json:"model"`
	Instructions     string `json:"instructions,omitempty"`
	AgentsMD         string `json:"agents_md,omitempty"`
	Tools            string `json:"tools"`
	Sandbox          string `json:"sandbox,omitempty"`
	By               string `json:"by,omitempty"`
}

// Key is r's idempotency key: one replay_started per session.
func (r ReplayStarted) Key() string { return "replay_started" }

// ReplayCompleted is the last event of an eval record (type replay_completed): how the
// replayed turn ended, and the recorded turn and the replayed one side by side — replies,
// tool calls, tokens and cost — with how the tool calls compare: Same (identical to a
// recorded call: its recorded result was served), Different (a tool the recorded turn called,
// with another input) and New (a tool the recorded turn never called) — each run in the
// what-if's sandbox (tools "sandbox", a sandbox's tool) or refused — and Missing (recorded calls the replayed turn did not make). RecordedThrough is the last seq of
// the recorded turn. Costs are micros of Currency, at the deployment's prices.
type ReplayCompleted struct {
	Status          string     `json:"status"`
	Error           string     `json:"error,omitempty"`
	RecordedThrough int64      `json:"recorded_through"`
	Recorded        EvalSide   `json:"recorded"`
	Replayed        EvalSide   `json:"replayed"`
	Same            int        `json:"tool_calls_same"`
	Different       int        `json:"tool_calls_different"`
	New             int        `json:"tool_calls_new"`
	Missing         int        `json:"tool_calls_missing"`
	ReplyChanged    bool       `json:"reply_changed"`
	Currency        string     `json:"currency"`
	Calls           []EvalCall `json:"calls,omitempty"`
}

// EvalSide is one side of an eval record: the turn's replies (assistant messages with text),
// tool calls, model calls, tokens and cost; Unpriced counts the model calls whose model has
// no price (their cost is not in CostMicros). Reply is the turn's last reply text.
type EvalSide struct {
	Replies          int    `json:"replies"`
	ToolCalls        int    `json:"tool_calls"`
	ModelCalls       int    `json:"model_calls"`
	InputTokens      int64  `json:"input_tokens"`
	OutputTokens     int64  `json:"output_tokens"`
	CacheReadTokens  int64  `json:"cache_read_tokens,omitempty"`
	CacheWriteTokens int64  `json:"cache_write_tokens,omitempty"`
	CostMicros       int64  `json:"cost_micros"`
	Unpriced         int    `json:"unpriced,omitempty"`
	Reply            string `json:"reply,omitempty"`
}

// EvalCall is one real model call of a what-if, as the budget charged it.
type EvalCall struct {
	Purpose          string `json:"purpose"`
	Provider         string `json:"provider"`
	Model            string `json:"model"`
	InputTokens      int64  `json:"input_tokens"`
	OutputTokens     int64  `json:"output_tokens"`
	CacheReadTokens  int64  `json:"cache_read_tokens,omitempty"`
	CacheWriteTokens int64  `json:"cache_write_tokens,omitempty"`
	CostMicros       int64  `json:"cost_micros"`
	Priced           bool   `json:"priced"`
}

// CodeChannelRequested records that the session's turn Turn is about to ask Slack for the
// session's code channel (type code_channel_requested, before agents.conversations.create;
// idempotency key code_channel/requested): Name is the name asked for. A request without its
// code_channel_created is a call that may have made the channel: the next try asks again with
// the same session_id, which Slack answers with the channel it made.
type CodeChannelRequested struct {
	Turn int64  `json:"turn"`
	Name string `json:"name"`
}

// CodeChannelCreated is the session's Slack code channel (type code_channel_created, once per
// session: idempotency key code_channel/created): its channel id, the thread it was made from
// (origin), the turn that made it, and the /logbook subcommands registered as its commands.
// Messages in the channel belong to the session (Store.SessionByThread).
type CodeChannelCreated struct {
	ChannelID     string   `json:"channel_id"`
	Name          string   `json:"name"`
	OriginChannel string   `json:"origin_channel"`
	OriginTS      string   `json:"origin_ts"`
	Turn          int64    `json:"turn"`
	Commands      []string `json:"commands,omitempty"`
}
