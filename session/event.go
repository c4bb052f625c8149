package session

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"
)

// ID identifies a session (a UUIDv7).
type ID = uuid.UUID

// ParseID parses a session id in its canonical text form.
func ParseID(s string) (ID, error) {
	id, err := uuid.Parse(s)
	if err != nil {
		return ID{}, fmt.Errorf("parse session id %q: %w", s, err)
	}
	return id, nil
}

// Type is an event's type: a stable string, written once and never renamed.
type Type string

// Conversation events.
const (
	TypeUserMessage        Type = "user_message"
	TypeUserMessageEdited  Type = "user_message_edited"
	TypeUserMessageDeleted Type = "user_message_deleted"
	TypeAssistantMessage   Type = "assistant_message"
	TypeToolCall           Type = "tool_call"
	TypeToolResult         Type = "tool_result"
)

// Marker events: bookkeeping that readers filter by type.
const (
	TypeTurnStarted        Type = "turn_started"
	TypeTurnCompleted      Type = "turn_completed"
	TypeQueued             Type = "queued"
	TypeTitle              Type = "title"
	TypeFileRef            Type = "file_ref"
	TypeDelivered          Type = "delivered"
	TypeCellWoken          Type = "cell_woken"
	TypeCellEvicted        Type = "cell_evicted"
	TypeSandboxProvisioned Type = "sandbox_provisioned"
	TypeSandboxLost        Type = "sandbox_lost"
	TypeError              Type = "error"
	TypeContextSummary     Type = "context_summary"
	TypeDuplicateDelivery  Type = "duplicate_delivery"
	// Thread manners: why the bot stayed silent, and who muted it.
	TypeNotAddressed  Type = "not_addressed"
	TypeThreadMuted   Type = "thread_muted"
	TypeThreadUnmuted Type = "thread_unmuted"
	// The live turn: a message streamed (or posted and updated) while the turn runs.
	TypeStreamStarted Type = "stream_started"
	TypeStreamStopped Type = "stream_stopped"
	// A person in charge of a running turn: a stop asked for, and the turn it stopped.
	TypeStopRequested Type = "stop_requested"
	TypeTurnStopped   Type = "turn_stopped"
	TypeSteered       Type = "steered"
	// Approvals: a tool call waiting for a person's decision, the decision, and a turn whose
	// cell stopped waiting in memory (the session sleeps until something can move it on).
	TypeApprovalRequested Type = "approval_requested"
	TypeApprovalDecided   Type = "approval_decided"
	TypeTurnSuspended     Type = "turn_suspended"
	// Approvals that separate duties (issue 52): a click counted towards a request that needs
	// more than one approver, a click refused by the request's rule (the requester under
	// not_requester, someone outside approvers_in), a scoped grant ("Allow for 30 min in this
	// thread") and its revocation.
	TypeApprovalVote         Type = "approval_vote"
	TypeApprovalRefused      Type = "approval_refused"
	TypeApprovalGrant        Type = "approval_grant"
	TypeApprovalGrantRevoked Type = "approval_grant_revoked"
	// An approved call about to run: a later cell never runs it again (its outcome is unknown).
	TypeToolStarted Type = "tool_started"
	// Files: a shared file's content fetched (or why not), and a file the agent handed back.
	TypeFileFetched Type = "file_fetched"
	TypeFileUpload  Type = "file_upload"
	// A pull request the agent opened (or found open) on the channel's repository.
	TypePullRequest Type = "pull_request"
	// The sandbox's uncommitted work, saved when it closed (content in the file store).
	TypeWorkSaved Type = "work_saved"
	// A person took the session over from the bot (it stays silent), and handed it back.
	TypeTakenOver  Type = "taken_over"
	TypeHandedBack Type = "handed_back"
	// A connection the sandbox asked its egress proxy for: allowed or refused, and its bytes.
	TypeEgressConnection Type = "egress_connection"
	// What a turn ran under: the channel's settings, the repository's instructions, the
	// memory offered (issue 31).
	TypeTurnSettings Type = "turn_settings"
	// Budgets (bot/budget): the thread told that a daily budget is nearly spent (once per
	// budget and day); the spend itself is in model_spend, a refused call an error event.
	TypeBudgetNotice Type = "budget_notice"
	// The channel's setup command, run in a new sandbox before the first model call (or
	// its workspace taken from the cache of an earlier run on the same commit).
	TypeSetupResult Type = "setup_result"
	// Pull requests followed (issue 32): the session follows a pull request it opened; a
	// signal about it (a failed check, a review asking for changes, the checks green, the
	// attempts used up) is work for the session as a user message is; a merge or close ends it.
	TypeFollowupSubscribed Type = "followup_subscribed"
	TypeFollowupSignal     Type = "followup_signal"
	TypeFollowupEnded      Type = "followup_ended"
	// A connector's tool whose description changed since the channel's sessions first listed
	// it (bot/connectors; a "rug pull"), recorded in the session that met the change.
	TypeMCPToolChanged Type = "mcp_tool_changed"
	// Connectors (bot/connectors): the thread told that an MCP server of its channel could
	// not be started or reached, so its tools were not offered (once per session and server).
	TypeConnectorUnavailable Type = "connector_unavailable"
	// A fork (issue 50): the first event of a session branched from another at one of its
	// events; it names the parent, the seq and the hash of the parent's event there.
	TypeSessionForked Type = "session_forked"
	// An eval record (issue 50: a session of kind replay, `logbook replay --from`): its first
	// event links the original at the user message the what-if ran from; its last sums the
	// recorded turn and the replayed one up.
	TypeReplayStarted   Type = "replay_started"
	TypeReplayCompleted Type = "replay_completed"
	// Reviews (bot/review, issue 52): a pull request to review at a head commit (and the
	// changed lines in scope), each finding recorded before anything is posted, the review
	// about to be posted (the marker its body carries), and the review posted or found.
	TypeReviewRequested Type = "review_requested"
	TypeReviewFinding   Type = "review_finding"
	TypeReviewPosting   Type = "review_posting"
	TypeReviewPosted    Type = "review_posted"
	// Slack's own surfaces (issue 54): a person's 👍 or 👎 on a reply (bot/feedback).
	TypeFeedback Type = "feedback"
	// Canvases (bot/canvas, issue 54): a reply too long for the thread about to be written as
	// a canvas (the intent, recorded before Slack is asked), and the canvas written.
	TypeCanvasStarted Type = "canvas_started"
	TypeCanvasWritten Type = "canvas_written"
	// A Slack code channel of the session (bot/codechannel): asked for (before the Slack
	// call), then made (its channel id, after it).
	TypeCodeChannelRequested Type = "code_channel_requested"
	TypeCodeChannelCreated   Type = "code_channel_created"
)

var knownTypes = map[Type]bool{
	TypeUserMessage: true, TypeUserMessageEdited: true, TypeUserMessageDeleted: true,
	TypeAssistantMessage: true, TypeToolCall: true, TypeToolResult: true,
	TypeTurnStarted: true, TypeTurnCompleted: true, TypeQueued: true, TypeTitle: true,
	TypeFileRef: true, TypeDelivered: true, TypeCellWoken: true, TypeCellEvicted: true,
	TypeSandboxProvisioned: true, TypeSandboxLost: true, TypeError: true,
	TypeContextSummary: true, TypeDuplicateDelivery: true,
	TypeNotAddressed: true, TypeThreadMuted: true, TypeThreadUnmuted: true,
	TypeStreamStarted: true, TypeStreamStopped: true,
	TypeStopRequested: true, TypeTurnStopped: true, TypeSteered: true,
	TypeApprovalRequested: true, TypeApprovalDecided: true, TypeTurnSuspended: true, TypeToolStarted: true,
	TypeApprovalVote: true, TypeApprovalRefused: true, TypeApprovalGrant: true, TypeApprovalGrantRevoked: true,
	TypeFileFetched: true, TypeFileUpload: true, TypePullRequest: true, TypeWorkSaved: true,
	TypeTakenOver: true, TypeHandedBack: true, TypeEgressConnection: true,
	TypeTurnSettings: true, TypeBudgetNotice: true, TypeSetupResult: true,
	TypeFollowupSubscribed: true, TypeFollowupSignal: true, TypeFollowupEnded: true,
	TypeMCPToolChanged: true, TypeConnectorUnavailable: true, TypeSessionForked: true,
	TypeReplayStarted: true, TypeReplayCompleted: true,
	TypeReviewRequested: true, TypeReviewFinding: true, TypeReviewPosting: true, TypeReviewPosted: true, TypeFeedback: true,
	TypeCanvasStarted: true, TypeCanvasWritten: true,
	TypeCodeChannelRequested: true, TypeCodeChannelCreated: true,
	TypeSettingChanged: true, TypeNoteAdded: true, TypeNoteForgotten: true, TypeRepoSet: true, TypeBudgetRaised: true,
	TypeScheduleAdded: true, TypeScheduleRemoved: true, TypeConnectorConnected: true,
	TypeAutomationPaused: true, TypeAutomationResumed: true,
}

// Known reports whether t is one of the event types the log accepts.
func (t Type) Known() bool { return knownTypes[t] }

// Conversation reports whether t is a conversation event (as opposed to a marker).
func (t Type) Conversation() bool {
	switch t {
	case TypeUserMessage, TypeUserMessageEdited, TypeUserMessageDeleted,
		TypeAssistantMessage, TypeToolCall, TypeToolResult:
		return true
	}
	return false
}

// ActorKind says who caused an event.
type ActorKind string

// Actor kinds.
const (
	ActorUser    ActorKind = "user"    // a Slack user; ID is the Slack user id
	ActorBot     ActorKind = "bot"     // logbook itself; ID is its Slack bot user id
	ActorSystem  ActorKind = "system"  // logbook's machinery (cells, gateway, retention); ID names the part
	ActorSandbox ActorKind = "sandbox" // a session's sandbox; ID names the provider
	ActorGitHub  ActorKind = "github"  // a GitHub account; ID is its login (a webhook's sender)
)

// Actor is who caused an event.
type Actor struct {
	Kind ActorKind `json:"kind"`
	ID   string    `json:"id"`
}

func (a Actor) String() string { return string(a.Kind) + ":" + a.ID }

// NewEvent is an event to append.
type NewEvent struct {
	Type  Type
	Actor Actor
	// Payload is encoded as JSON: a struct, a map, or json.RawMessage holding a JSON object.
	// nil encodes as {}.
	Payload any
	// IdempotencyKey, when set, makes the append idempotent within the session: appending
	// the same key again writes nothing and returns the stored event with Duplicate set.
	IdempotencyKey string
}

// Event is a stored event.
type Event struct {
	SessionID      ID
	Seq            int64     // 1..n, dense within the session
	ID             uuid.UUID // UUIDv7, time-ordered
	Type           Type
	Actor          Actor
	CreatedAt      time.Time
	Payload        json.RawMessage // nil after a retention purge
	PayloadHash    []byte          // sha256 of the payload as PostgreSQL renders it
	IdempotencyKey string
	PrevHash       []byte
	Hash           []byte
	Sanitized      bool  // text that PostgreSQL cannot store was replaced by U+FFFD
	Position       int64 // global, cross-session; allocated at insert, not commit order
	// TxID is the id (xid8) of the transaction that appended the event, set by ReadAll only:
	// with Position it is the event's place in the cross-session stream (a Cursor).
	TxID uint64
	// Duplicate is set on events returned by an append whose idempotency key was already
	// stored: the event is the one stored earlier.
	Duplicate bool
}

// Decode unmarshals the payload into v.
func (e Event) Decode(v any) error {
	if e.Payload == nil {
		return fmt.Errorf("decode %s event %d of session %s: %w", e.Type, e.Seq, e.SessionID, ErrPurged)
	}
	if err := json.Unmarshal(e.Payload, v); err != nil {
		return fmt.Errorf("decode %s event %d of session %s: %w", e.Type, e.Seq, e.SessionID, err)
	}
	return nil
}
