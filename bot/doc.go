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
// session's cell (in process and through PostgreSQL NOTIFY).
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
// is signalled; it takes the session's lease (an epoch-fenced row: every append the cell
// makes carries the epoch, and the database refuses appends from a stale one), appends
// cell_woken, rehydrates from the log, and runs turns: turn_started, the agent (which appends
// tool calls, tool results and the reply), delivery (post with metadata carrying the event
// id, then delivered), turn_completed. Messages that arrive mid-turn get a queued marker and
// are answered in the next turn. After the idle timeout the cell appends cell_evicted, closes
// its sandbox, releases the lease and exits, keeping nothing in memory. On start the runner
// wakes every session with an unfinished turn; a crash is a replay.
//
// # Delivery
//
// A reply is posted in parts (Slack mrkdwn, split under Slack's limits without breaking code
// blocks), each with message metadata {event_type: "logbook_reply", event_payload:
// {event_id, part, parts}}. An assistant_message without delivered is looked up in the
// thread by that metadata before anything is posted again, so a reply is never lost and never
// shown twice.
package bot
