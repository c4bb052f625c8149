// Package brain is logbook's agent loop: it turns a session's events into a model request,
// calls the model, runs the tools the model asks for in the session's sandbox, and appends
// everything that happens to the session's log as it happens. It holds no history of its own:
// every round is rebuilt from the log, so a brain can die at any point and the next one, on
// any replica, carries on.
//
// # Contract with the cell
//
// The cell (package bot) owns the session's lease. It appends turn_started (whose Through is
// the last user message the turn answers), calls [Brain.Run] once with a [Turn] — the session,
// a [Log] bound to the session and the lease epoch, the sandbox ([Hands], provisioned lazily,
// may be nil), the tools its parts offer ([Tool], [Toolset]: the brain dispatches a call by
// its tool's name) and [Where] the thread is — then
// delivers the returned [Reply] and appends turn_completed with Reply.Status and Reply.Reason.
// The brain never talks to Slack.
//
// # One turn
//
//  1. Repair. Every tool_call in the log without a tool_result (the process died mid-tool) gets
//     an appended tool_result{is_error, synthetic, "interrupted; outcome unknown"}, in call
//     order, so the provider accepts the history again. The call is not run again: its outcome is unknown and it may not be
//     idempotent. Old events are never changed.
//  2. Context. The events after the newest context_summary's range become provider-neutral
//     messages ([Message], [Block]): markers are skipped by type; a user message shows its
//     newest edit and deleted ones are left out; users are named ("Alice: ..."), a leading
//     mention of the bot is removed, and a bare mention never becomes an empty text block (the
//     APIs refuse one: a thread of bare mentions is answered "What can I help with?" without a
//     model call);
//     messages that arrived after the turn's Through wait for the next turn; the order is the
//     turns' order, not raw seq order: a message that arrived while an earlier turn ran (above
//     that turn's Through, below its turn_completed) follows that turn's reply, so it never
//     splits a tool_use from its tool_result and the next turn's request ends with it; each
//     assistant message is followed by one user message with its tool results in call order;
//     consecutive messages of one role are merged; results that answer no tool use of the
//     message before are dropped. The files shared with a user message follow its text (see
//     Files below).
//  3. Budget. The history is measured in input tokens: by the provider where it can count
//     ([TokenCounter]: Anthropic's count-tokens endpoint through the SDK; tiktoken, offline
//     from embedded BPE files, for OpenAI's own models), else — and whenever counting fails,
//     or the estimate is under a quarter of the budget — by the estimate (bytes/4 plus a
//     little per block; OpenAI-compatible local models always use it). Over
//     Config.ContextBudget, the older turns are summarised by the model and the summary is
//     appended as context_summary{from_seq, to_seq, summary, tokens, budget, method}: the
//     budget's decision is in the log. Cuts fall only at turn boundaries (a user message after
//     a plain reply), so a tool_use and its tool_result are kept or dropped together (a provider
//     refuses either without the other).
//     Later requests send the summary plus the events after to_seq, and offer the read_log
//     tool (only then: without a summary every message is in the request). The model rereads
//     its own session's log through Turn.Log — a seq range, some conversation types, or the
//     events before a seq; never markers, at most 50 events and 12 KiB a call — and the
//     tool_call and tool_result events record what it reread.
//  4. Validate. Before every request a validator checks what the providers check: the first
//     and last messages are the user's, roles alternate, no block is empty, every tool_use is
//     answered by a tool_result at the head of the next message and every tool_result answers
//     one. A history that fails ends the turn with an error event instead of a request the
//     provider would reject.
//  5. Call. Transient errors (408, 409, 429, 5xx including Anthropic's 529 overloaded, no
//     response) are retried with exponential backoff, full jitter and at least the server's
//     Retry-After, within RetryPolicy.Attempts and the turn's remaining wall time; the SDKs'
//     own retries are off. Permanent errors (400, 401, 403, ...) are not retried.
//  6. Act. A response with tool uses is appended as one batch — assistant_message{text,
//     tool_call_ids, usage} and its tool_call events — then each tool runs and its
//     tool_result is appended (an error is a result the model reads, never a crash). Then the
//     next round starts at 2. A response without tool uses is appended as the reply
//     (assistant_message with no tool_call_ids) and returned. Usage (provider, model, tokens,
//     stop reason, latency) is recorded on every assistant_message that came from a call.
//     Every stop reason is handled (see classifyStop): a reply cut by the output limit
//     (max_tokens, length) or paused (pause_turn) is continued up to Config.MaxContinuations
//     times and otherwise says plainly that it was cut; of a response with tool uses that the
//     limit cut, the last call (the one being written) is not run and its result says so, so
//     the model can retry smaller; a refusal or content_filter ends the turn with an honest
//     reply and runs nothing. A tool call (same tool, same input) failing the same way
//     Config.RepeatLimit times in a turn ends it with a reply that says so.
//  7. Title. After the first reply of a session, a short model-written title event is appended
//     (the first words of the thread if that call fails); at most one per session.
//
// Limits per turn: Config.MaxRounds tool rounds (then the model is asked with tool_choice none
// to answer), Config.MaxTurnTime of wall time (tools and calls included), Config.MaxToolOutput
// bytes per result and Config.MaxTurnOutput bytes for all results of the turn; cut output
// keeps its head and tail around a "[… output truncated: N bytes omitted …]" marker and the
// result has truncated set.
//
// # Files
//
// A file shared in the thread is a file_ref event (with the ts of the message that shared it)
// and, once the bot tried to fetch it, a file_fetched event: stored under its sha256, too
// large, or failed. Run reads the content of the stored files its history shows through
// Turn.Files, each once a Run (a failed read is a note, never a failed turn; without
// Turn.Files files are only named), and [FileKind] decides how each is shown, after its
// message's text:
//   - an image the providers take (PNG, JPEG, GIF, WebP; at most 5 MB base64-encoded, as
//     Anthropic counts, and 8000 pixels a side): a line naming it, then an Image block —
//     Anthropic's base64 image block, Chat Completions' image_url part with a data: URL;
//   - a PDF (at most 100 pages): a line naming it, then a Document block — Anthropic's base64
//     document block; on api.openai.com the file part (file_data a data: URL, filename);
//     OpenAI-compatible servers, which do not take it, get a note;
//   - text (by content: valid UTF-8 without NUL bytes; or by a text mimetype or extension): a
//     line naming it, then its content in a fenced block, head and tail kept within 32 KiB a
//     file and 96 KiB for all files of a request, with a line saying what was cut;
//   - anything else, and whatever was too large, failed, was never fetched or could not be
//     loaded: a note naming it (name, type, size, who shared it) and why, and where its copy
//     in the sandbox is, if it has one (file_fetched's Workspace), for run_command.
//
// The budgets of a request go to the newest files first; the images and documents of one
// request stay within 20 and 28 MiB base64-encoded (both APIs take 32 MB), and older ones
// past that are named instead. Images and documents appear only in user messages, never in a
// tool result; a summary or a title request is text, where each is a one-line note.
//
// A tool may return images (an MCP server's): the brain shows the model those it takes, kept
// by hash (Turn.Keep), and names the others.
//
// # Failures
//
// A model that refuses the request, stays unavailable, or a turn that runs out of time ends
// with an error event {stage, code, message} and a short reply that says so (Reply.Status
// "error"), so the thread always hears back. The reply is a fixed sentence: an error's text
// (ids, SQL, Go error chains, the API's message) goes to the operator's log line and the error
// event, never to the thread (issue 17). Run returns an error only when the log refuses an
// append (session.ErrFenced after a lost lease) or ctx ends; the next turn repairs whatever
// was left half done. A turn whose reply is already in the log (an assistant_message whose
// Turn is this turn's turn_started seq) returns that reply without a model call, so re-running
// a turn after a crash does not answer twice; an earlier turn's reply never counts.
//
// # Providers
//
// [NewProvider] takes LOGBOOK_MODEL's value: "anthropic:<model>" (the Messages API through
// github.com/anthropics/anthropic-sdk-go), "openai:<model>" (Chat Completions through
// github.com/openai/openai-go/v3, which also serves Ollama, vLLM and llama.cpp) or "offline"
// ([Offline], a deterministic stand-in that says it is not a language model and turns
// "run: <command>" into a tool call). Keys and base URLs arrive in [ProviderConfig]; the
// package never reads the environment, and the SDKs are built without their environment
// defaults. Keys never reach a log line or an event. A failing provider is never replaced by
// the offline one.
//
// A request with OnText streams (the Anthropic SDK's Messages.NewStreaming, accumulated with
// Message.Accumulate; Chat Completions with stream_options.include_usage, accumulated with
// ChatCompletionAccumulator; the offline provider in groups of words) and returns the same
// Response as without: text, tool uses, usage and stop reason. A stream that fails part way —
// a dropped connection, an error event such as overloaded_error, a stream that ends before
// its stop — is the same *ProviderError as a failed call (an error event gets the status the
// API gives its type: overloaded_error 529, rate_limit_error 429), so the retries apply.
// Without OnText the calls do not stream.
//
// A session may switch provider between turns. Tool-call ids are logged as the provider that
// made them sent them and mapped on the wire only, by a pure function of the id (ids.go): the
// Anthropic API gets ids matching ^[a-zA-Z0-9_-]+$ ("functions.run_command:0" becomes
// "functions_run_command_0_<hash>"), OpenAI-compatible APIs get ids of at most 40 characters;
// an id the API accepts is sent unchanged, and a tool_use and its tool_result always agree.
//
// Package fakeprovider, beside this one, serves both HTTP APIs for tests and rejects what the
// real APIs reject.
package brain
