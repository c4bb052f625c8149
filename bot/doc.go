// Package bot is logbook's Slack side: the Socket Mode gateway, the cells that run sessions,
// and delivery of replies.
//
// # Gateway
//
// The [Gateway] reads envelopes from Slack over Socket Mode (slack-go's socketmode client,
// which reconnects on its own). For each events_api envelope it decides by [Classify] what the
// event means, and for a message that belongs to a session it opens the session
// (team, channel, thread ts) idempotently, appends the event with the idempotency key
// team/channel/ts, and only then acks. If the append fails the envelope is not acked and
// Slack delivers it again. Envelopes it ignores are acked at once. It then signals the
// session (Runner.Signal), which wakes one replica only: a cell running here is poked with no
// statement; otherwise one statement (session.Store.NotifyOwner) finds the live lease owner
// and signals it alone — posted to its peer inbox (bot/peerwake) when it has one, else by a
// NOTIFY naming it — and when nobody holds the session the cell starts here.
//
// Handled: messages in public channels (channel_type "channel", or conversations.info says
// not private, not a DM) with no subtype, thread_broadcast or file_share; message_changed
// and message_deleted of messages in a session's thread; app_mention. A top-level message
// that mentions the bot starts a session; any later message in a thread that has a session
// continues it, mention or not; a mention inside a thread without a session starts one for
// that thread. Ignored: messages of any bot (bot_id, the bot's own user id, bot_message),
// other subtypes (channel_join, ...), and everything in private channels, group DMs and DMs,
// which is never stored (the user gets one short note, configurable off).
//
// # Cells
//
// A [Cell] is a single-owner actor for one session. The [Runner] starts it when a session
// is signalled, from the dependencies it was built with (no back-pointer); the cell takes the
// session's lease (an epoch-fenced row: every append the cell makes carries the epoch, and the
// database refuses appends from a stale one), reads the log once (cellLog keeps it in memory
// and afterwards reads only what others appended), and runs turns while the log shows work.
// Its first write carries cell_woken. After the idle timeout it appends cell_evicted, closes
// its sandbox, releases the lease and exits, keeping nothing in memory. On start (and on
// each poll) the runner wakes the sessions with an unfinished turn, oldest first, at most
// RunnerConfig.WakeLimit (LOGBOOK_WAKE_LIMIT) of them until some go idle; a crash is a replay.
//
// # Failover
//
// The runner's LISTEN connection also holds its liveness claim (session.ListenClaimed: a
// session-level advisory lock on its owner name), and cells take leases as claimed while it
// is held. PostgreSQL frees the claim the moment that connection ends, so when a process
// dies (kill -9, OOM) its sessions are free at once, not after the lease's TTL: a restarted
// process finds them in its first poll, a peer the moment its watch sees the claim freed
// (RunnerConfig.WatchPeers) or in its poll (Store.PendingWith counts a
// claimed lease whose claim is free as nobody's; every RunnerConfig.PollInterval, 5s), and a new message in an idle thread of the dead
// process takes the lease at once. The claim's connection keeps TCP keepalive on and makes a
// round trip every RunnerConfig.ClaimCheck (5s), which must answer within ClaimCheck: a
// connection that fails or goes silent (a failover that leaves its socket open to a server
// that no longer answers, while the new primary holds no claim of it) ends the claim, and
// the runner cancels every cell whose lease was taken with it at once (exit "claim_lost",
// logbook_liveness_claims_lost_total), since peers may take those sessions now. A replica
// whose claim connection still answers keeps its claim, and is stopped by lease expiry and
// the epoch fence exactly as before.
//
// With RunnerConfig.Heartbeat (LOGBOOK_LIVENESS=heartbeat) the claim is a row instead
// (session.Store.HoldHeartbeat): renewed through the pool, trusted for less than the database
// holds it, its loss cancels the same cells; the runner then has no LISTEN connection and no
// watch, takes wakes over HTTP only, and a dead replica's sessions are free when its row
// expires.
//
// When the log cannot be written (an append or session lookup fails) the gateway leaves the
// envelope unacked for Slack to redeliver, marks Health (serve's /readyz is unready until an
// append succeeds), and notes a gap; so does a socket that reconnects. Once the log takes
// writes again it catches up from Slack (catchup.go): the threads of sessions active since
// the gap and the top-level messages of their channels are read back and go through the
// envelopes' own path, so what Slack gave up redelivering is stored once and answered.
//
// On a graceful stop (SIGTERM, Run's ctx ends) the gateway stops reading envelopes (those
// not acked are delivered again by Slack, to a peer) and the runner drains: no new cells or
// turns; idle cells exit at once; running turns get RunnerConfig.DrainTimeout to finish and
// are then cancelled. Every cell whose session still has work releases its lease and then
// NOTIFYs, so a peer resumes it at once; the claim is held until the drain ends.
//
// # Turns
//
// A turn lives in turn.go; it is the only code that appends a turn's markers. It is a value
// the cell builds (Cell.newTurn) from the parts it uses: the session, its log and sandbox, the
// runner's agent, deliverer, clock and config, and [Features] whole, so an optional part is a
// field there and a call in the phase that uses it. In order:
//
//  1. turn_started{through} (with cell_woken when it is the cell's first write). through is
//     the last user message the turn answers; later ones get a queued marker while the
//     turn runs and are answered by the next turn.
//  2. the agent ([Agent], the brain) appends the conversation through the cell's log:
//     assistant_message with its tool_call events, tool_result, context_summary, and the
//     reply assistant_message. It is given the turn's bounds (brain.Turn.Through).
//  3. the [Deliverer] posts the reply and returns the ts of its parts; the turn then appends
//     delivered and turn_completed in one append (error and turn_completed{status: error}
//     when delivery can never succeed).
//  4. the [Titler] names the session after its first reply reached the thread.
//
// A resumed turn (turn_started without turn_completed: the previous cell died) delivers the
// reply the log already has, searching the thread first, or runs the agent again; a turn
// taken up by more than three cells is closed with an error, and the thread is told so once
// (abandon.go: a stored assistant_message, delivered like any reply). A first turn without tools
// costs its cell eight round trips and one read of the log (TestFirstTurnCost).
//
// # The live turn
//
// While a turn runs, its live view (live.go, a brain.Live) shows it in Slack: the thread's
// status at once (agent session, else assistant-thread status, else a reaction; cleared on
// every way out of the turn), then the model's text in a streamed message as it is written
// and a task card per tool call, sent at most every LiveConfig.Interval by one flusher
// goroutine; the brain's calls only buffer. Where streaming is unavailable the text goes into
// a posted message updated as it grows. Before Slack's age or size limit, or when Slack stops
// taking appends, the view rolls over to a new message. The log records each message
// (stream_started) and its end (stream_stopped: done, rollover, recovered, deleted). At the end
// the view shows the reply exactly once: the rest of it appended as the stream stops, with
// the reply's metadata, or — when what streamed is not the reply's beginning — the message
// the final round began in replaced by the whole reply and later ones removed. A cell that
// dies mid-stream leaves live messages the next cell finishes from the log (recoverLive):
// with the reply stored, the first is made to show it; without, they are removed and the turn
// runs again. The bot's messages in the thread that the log does not know (a cell killed
// between Slack's answer and its record) are treated the same.
//
// # Stop and steer
//
// A person stops a running turn with Slack's stop button (agent_session_stopped), the
// octagonal_sign reaction on any message of the thread (both stored by the gateway as
// stop_requested, with who asked, and signalled like any message), or a thread message that
// is exactly "stop". Whichever cell runs the turn sees it on its next read of the log and
// cancels the agent's context — the model call and the sandbox's commands end with it —,
// finishes the live message with a "Stopped by" note, and completes the turn with
// turn_stopped and turn_completed{status: stopped}; nothing more is posted. With
// RunnerConfig.MidTurn "steer" (the default), a message written while a turn runs is handed
// to the model at its next call (brain.Turn.Steer), recorded as steered, and the turn's
// turn_completed covers it.
//
// # Each channel its own agent
//
// With Features.Settings, a turn reads its channel's settings once, as it starts (loadChannel:
// a channel's record from /logbook config wins over the configuration): its thread-replies
// mode decides what it answers, its approvals policy replaces RunnerConfig.Approval.Policy,
// and its model runs the turn (Features.Models: the brain with another provider). The rest
// comes from the turn's parts: the channel's instructions (settings.Part), the repository's
// instruction files (checkout.Part, read through Hands: at provisioning — a channel with a
// repository gets its sandbox before the first model call — and again at each later turn)
// and the channel's memory with the remember tool (memory.Part). Before the agent runs, the
// turn appends turn_settings: what it runs under, its own fields and the parts', and a hash.
//
// # Parts
//
// A capability of the turn is a part.Part from a package of its own, listed once in
// cmd/logbook (Deps.Parts): just before the agent runs (turn.produce, offer.go) each part is
// offered the turn's scope — session, turn, channel settings, fenced log, sandbox, a place to
// keep things for the cell's length — and answers with tools (brain.Tool), guidance, its
// fields of turn_settings and the lines it puts under the reply. A turn that needs no model
// (a canned reply, a reply a dead cell left) offers nothing; every answering turn has its
// Settlers settle what a dead cell left (turn.prepare) and its Footers' lines under the reply. The engine keeps what wraps
// its own calls: approvals, steering, the live view, delivery, and the budget's admission of
// each model call (Features.Budget).
//
// # Approvals
//
// RunnerConfig.Approval.Policy (LOGBOOK_TOOL_APPROVAL) says per tool, and per channel, whether
// a call runs (allow), never runs (deny: the model is told so as the tool's result) or waits
// for a person (ask). The brain asks the turn before each call (brain.Turn.Approve, approval.go).
// For ask, the turn appends approval_requested (what will run, the deadline), then posts a
// Block Kit card with Approve and Deny whose message metadata names the call. A click arrives
// as a block_actions envelope; the gateway (decide.go) acks it, checks that the clicker may
// decide (GatewayConfig.Approvers; anyone else gets an ephemeral note), appends
// approval_decided with the clicker as actor under the call's idempotency key (the first
// decision wins), updates the card and signals the session. The waiting turn sees the decision
// on its next read of the log; at the deadline it appends the timeout itself. A turn that waits
// past the cell's idle timeout, or during a graceful stop, is suspended: turn_suspended, and the
// cell goes away; migration 00008 keeps the session out of the pending poll until a decision, a
// stop request, a user message or the deadline. The next cell resumes the open turn: the brain
// goes on with the round that waited, finding the request in the log and its card in the
// thread, so no card is ever shown twice.
//
// An ask rule may separate duties (approvalrule.go: approvers:N, not_requester,
// approvers_in:<user group>); the request records the rule, and the gateway checks each click
// against that record: a vote (approval_vote, one idempotency slot per distinct approver) until
// the N-th approval decides, a refusal by the rule (approval_refused), or the decision. The
// card's "Allow for 30 min in this thread" also makes a grant (grant.go: approval_grant, after
// its decision is stored); the turn lets a later call of the same tool under the same rule run
// without a card while a grant of its session is live (approval_decided via grant_applied,
// naming it), reading the log again first so a revocation (approval_grant_revoked,
// /logbook grants) holds at once.
//
// # Files
//
// The file_refs of the messages a turn answers are fetched before the model is called
// (files.Shared, a part): downloaded with the bot token, stored content-addressed
// (session/filestore), and recorded as file_fetched — stored with its hash, too large, or failed
// after retries; a kind the model cannot read is also copied into the sandbox. The brain
// gives the model what it can read (brain.Turn.Files); the reply's footer names what could not
// be read. files.Attach hands files back (attach_file): the upload is recorded (file_upload
// "uploaded") before files.completeUploadExternal shares it, and a resumed turn asks
// files.info before sharing anything, so a file is shared once.
//
// # Thread manners
//
// manners.go decides, for each message a turn takes up, whether it is for the bot
// (RunnerConfig.ThreadReplies): asides and messages for someone else are recorded with a
// not_addressed marker; mute and unmute append thread_muted / thread_unmuted. A turn that
// answers none is closed at once, silently (turn_completed{status: silent}), in the same
// append as its turn_started; canned replies (mute, unmute, a mention while muted) are stored
// with the turn_started and delivered like any reply.
//
// # Sessions logbook starts itself
//
// A schedule's tick (bot/schedule) and a signed hook (bot/hooks) each start a session without
// a person's message: [Starter] (start.go) posts one top-level message in the channel, with
// message metadata naming the tick or the delivery, opens the session of its thread, appends
// its first user_message (the prompt, from the schedule's author or the hook as system actor)
// and signals it; from there it is a session like any other. A retry of an opening whose
// first attempt may have posted (its replica died) looks for that post in the channel's
// history by its metadata first, so an opening is posted once.
//
// # Delivery
//
// A reply is posted in parts (Slack mrkdwn, split under Slack's limits without breaking code
// blocks), each with message metadata {event_type: "logbook_reply", event_payload:
// {event_id, part, parts, session, turn, epoch}} (epoch: the cell's lease epoch; the live
// view's posted messages carry "logbook_live", an operator's note "logbook_note"). An assistant_message without delivered is looked up in the
// thread by that metadata before anything is posted again, so a reply is never lost and never
// shown twice.
package bot
