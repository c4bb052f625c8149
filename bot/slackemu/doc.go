// Package slackemu is a local Slack: a Web API over HTTP and a Socket Mode
// WebSocket server that the unmodified github.com/slack-go/slack client
// (slack.New with OptionAPIURL(s.APIURL()) and OptionAppLevelToken, then
// socketmode.New) connects to, receives events from, acks and posts replies to
// as it would against Slack. Tests, benchmarks and `logbook dev` use it.
//
// # Lifecycle
//
// Start(opts) listens (default 127.0.0.1:0) and serves; Close stops serving,
// closes every socket, stops every timer and waits for every goroutine it
// started. Run(ctx, opts, ready) wraps both for `logbook slack-emulator`.
// APIURL() ends with "/", as slack-go's OptionAPIURL requires; BotToken() and
// AppToken() are the tokens it accepts. The zero Options give team T0000001,
// bot user UB000001 / bot id B0000001 / app A0000001, users U0000001, U0000002,
// another app's bot U0000009 (B0000009), channels C0000001 (public),
// C0000002 (private), C0000003 (public, bot not a member), C0000004 (archived),
// DM D0000001, and the subscriptions app_mention + message.channels +
// agent_session_stopped.
// With Options.StateFile the workspace (users, channels, messages and threads, files
// and their bytes) is loaded from that file on Start and saved to it, atomically, on
// every change, so a restarted emulator (`logbook dev`) accepts replies in old threads
// and still serves old files.
//
// # Emulated, each exercised by this package's tests
//
// Socket Mode:
//   - apps.connections.open with the app token in a Bearer header only; a bot
//     token gets not_allowed_token_type, an unknown one invalid_auth (fatal for
//     slack-go), none not_authed. The returned ws:// URL carries a single-use
//     ticket; a reused ticket is refused with HTTP 401.
//   - Origin https://api.slack.com is accepted; `hello` (num_connections,
//     connection_info.app_id) is the first frame of every socket.
//   - WebSocket PING control frames every Options.PingInterval; PONGs are
//     counted; a client PING gets a PONG. Each socket has exactly one writer
//     goroutine.
//   - Frames that are not acks (malformed JSON, no envelope_id, or 20 KB and
//     more, which Slack drops) are kept in BadFrames and settle nothing.
//   - events_api envelopes: event_callback with team_id, api_app_id, event_id,
//     event_time, authorizations (the bot) and the inner event;
//     accepts_response_payload false; acks by envelope_id on any socket.
//   - Ack window (Options.AckTimeout, default 3s): an unacked envelope is
//     redelivered with a new envelope_id, the same event_id, retry_attempt+1 and
//     retry_reason "timeout", after the waits in Options.RetrySchedule (default
//     0, 1m, 5m: three retries), then given up. A late ack of a superseded
//     envelope settles nothing (Ack.Stale).
//   - An attempt made while no socket is open fails at once and the retry
//     schedule continues, so such events arrive by a later retry once a socket is
//     open; FireRetries sends waiting retries now instead of sleeping, and
//     ExpireAcks ends an ack window now instead of waiting for AckTimeout.
//   - Several sockets share events, each envelope (and each retry) to one socket picked at
//     random, as Slack does.
//   - `disconnect` with reason warning, refresh_requested or link_disabled on
//     demand (the socket then gets no new envelopes and is closed after
//     Options.DisconnectGrace); slack-go reconnects with a new
//     apps.connections.open. Stall makes a socket a black hole (no PINGs, no
//     frames), which slack-go's ping watchdog turns into a reconnect.
//   - slash_commands envelopes (accepts_response_payload true,
//     is_enterprise_install sent as "false", false or absent in turn); the ack
//     payload becomes an ephemeral or in_channel message; the response_url takes
//     5 JSON POSTs (HTTP 404 after). Slash commands are not retried; with no
//     socket open the command fails.
//   - Delivery faults: drop (the ack window still runs, so a retry follows),
//     delay, duplicate (same frame twice); raw frames for malformed-envelope tests.
//
// Events (message for the subscribed channel types and only where the bot is a
// member; app_mention when <@bot> is in the text, never in a DM):
//   - a mention fires message and app_mention with the same ts and distinct
//     event_ids; message carries channel_type (channel, group, im, mpim),
//     app_mention does not; thread replies carry thread_ts and parent_user_id.
//   - subtypes thread_broadcast (with root), message_changed (hidden, message,
//     previous_message, edited) plus a new app_mention with edited when the
//     edited text mentions the bot, message_deleted (deleted_ts,
//     previous_message), file_share (files, upload), channel_join, bot_message.
//   - the bot's own posts echo as message with user, bot_id, app_id and
//     bot_profile, no subtype; another app's bot posts carry its bot_id.
//   - PublishEvent sends any other inner event (e.g. reaction_added) with the
//     same delivery semantics.
//
// Web API (form or JSON bodies, token in the body or a Bearer header; app errors
// are HTTP 200 {"ok":false,"error":…}): auth.test; chat.postMessage (thread_ts,
// reply_broadcast, blocks, metadata; channel_not_found for a private channel
// without the bot, not_in_channel, is_archived, no_text, invalid_blocks for a
// section over 3000 characters or more than 50 blocks, invalid_blocks_format,
// invalid_metadata_format; text over 40,000 characters is truncated with the
// message_truncated warning; a thread_ts naming no top-level message posts
// unthreaded); chat.update (cant_update_message, msg_too_long over 4,000
// characters, fires message_changed); chat.delete (cant_delete_message,
// message_not_found, fires message_deleted); chat.getPermalink;
// chat.postEphemeral (user_not_in_channel); conversations.info (is_private,
// is_im); conversations.members (one page); conversations.replies (parent first, limit, opaque cursors,
// has_more, metadata only with include_all_metadata, thread_not_found,
// invalid_cursor, not_in_channel); conversations.history (top level and
// broadcasts, newest first, oldest/latest/inclusive, pages capped at
// Options.HistoryMaxLimit); users.info (user_not_found); usergroups.users.list
// (AddUserGroup; no_such_subteam, missing_argument); reactions.add/remove
// (already_reacted, no_reaction, invalid_name); assistant.threads.setStatus
// (stored with up to 10 loading_messages, as a JSON array or slack-go's comma list;
// cleared when the bot replies or starts a stream in the thread);
// agents.sessions.setStatus (processing|active|suspended|closed, else invalid_status;
// every status kept in order; with a code channel's channel_id and no thread_ts, the code
// channel's own) and agents.sessions.rename (agent_session_not_found before a setStatus);
// Slack Code code channels (agents.go): agents.conversations.create (a public or private
// channel the bot and the origin message's author are members of; idempotent by session_id;
// name or origin_channel_id+origin_message_ts required, else invalid_arguments;
// message_not_found, channel_not_found, not_allowed for a Slack Connect origin or an app
// refused by SetCodeChannelsAllowed), agents.conversations.setProperties (context bar items
// need key and label, item_type info|action, more than five are cut with a warning;
// invalid_arguments, not_allowed for a channel that is no code channel, is_archived),
// agents.conversations.setCommands (names without a slash) and agents.conversations.archive;
// CodeChannels and CodeChannel show them. Rate limits are token
// buckets per method, optionally per channel (Options.RateLimits,
// SetRateLimit; NonMarketplaceLimits are Slack's history limits for apps outside the
// Marketplace), answered with HTTP 429, Retry-After in whole seconds and
// error ratelimited, which slack-go turns into *slack.RateLimitedError.
// InjectMethodFault makes a method answer a Slack error code or an HTTP status, or
// close the connection without an answer (Drop), optionally after really performing
// the call (an ambiguous failure).
//
// Files (a File is metadata plus Content; Post.Files and ShareFile store them, Size
// defaulting to len(Content), Mimetype and Filetype inferred when empty):
//   - Downloads: a file object's url_private is URL()+"/files-pri/{team}-{file}/{name}"
//     and url_private_download ".../files-pri/{team}-{file}/download/{name}", on the
//     emulator's host, so slack-go's GetFile sends the token there. GET with
//     "Authorization: Bearer <bot token>" answers 200 with the bytes and the file's
//     Content-Type (Content-Disposition attachment for the download URL); no or another
//     token, or a file outside the bot's conversations, 403 (Options.FileAuthRedirect: a
//     302 to a sign-in page instead, as files.slack.com does); an unknown, deleted or
//     uncompleted file 404. Downloads and DownloadAttempts count them per file;
//     InjectDownloadFault answers a status (or breaks the transfer half way) a number
//     of times.
//   - Uploads: files.getUploadURLExternal (filename and length > 0 required, else
//     invalid_arguments; alt_txt over 1,000 characters alt_txt_too_large; snippet_type)
//     answers upload_url URL()+"/upload/v1/{token}" and a new file_id. A POST there takes
//     the bytes raw or multipart (the first file part: slack-go's UploadToURL sends field
//     "file", curl -F filename=@… field "filename") and answers 200 "OK - <bytes>"; 404
//     once the file is completed or deleted. files.completeUploadExternal (files
//     [{"id","title"}], channel_id and/or channels, user ids meaning their DM with the
//     bot, thread_ts, initial_comment, blocks) posts, per conversation, one bot message
//     (user, bot_id, app_id, bot_profile, subtype file_share, upload false, the files)
//     and fires its `message` event like chat.postMessage; it answers {"ok":true,"files":
//     [file objects]}. Without a channel the file stays private (unshared). An id not
//     reserved by the app or whose bytes never arrived answers file_not_found; channel
//     errors are chat.postMessage's (channel_not_found, not_in_channel, is_archived).
//     Completing a file again shares it again, so exactly-once needs a files.info check.
//   - files.info (file): the full file object with channels, groups, ims and shares
//     {"public"|"private":{"C…":[{ts, thread_ts (for a thread reply), channel_name,
//     team_id, share_user_id, reply_count, reply_users, reply_users_count,
//     latest_reply}]}}, as slack-go's File.Shares decodes them; file_not_found for an
//     unknown file, an upload not completed, or a file outside the bot's conversations;
//     file_deleted once deleted. files.delete (file): the app's own files
//     (cant_delete_file for others', file_deleted, file_not_found). A deleted file shows
//     as {"id","mode":"tombstone"} in the messages that carried it.
//
// Streaming (chat.startStream, chat.appendStream, chat.stopStream; a Stream per message):
//   - chat.startStream (channel, thread_ts, markdown_text, chunks, recipient_user_id,
//     recipient_team_id, task_display_mode timeline|plan|dense) posts the bot's reply
//     at once: it is in conversations.replies and Thread, Message.Streaming is true, and
//     it echoes as a `message` event exactly like a chat.postMessage reply — once, at the
//     start (appends and the stop fire no events). Outside DMs a missing recipient answers
//     missing_recipient_user_id, then missing_recipient_team_id; an unknown user
//     user_not_found; another mode invalid_arguments; channel errors as chat.postMessage.
//   - chunks: markdown_text (appended to the text), task_update (id, title, status
//     pending|in_progress|complete|error, details, output, sources; a known id updates its
//     card: title and status replace, details append, output and sources replace),
//     plan_update (title), blocks. Anything else, a task without id or a title over 256
//     characters answers invalid_chunks. The message's text is the accumulated markdown;
//     its blocks are the task cards (task_card blocks, one plan block in plan mode), then
//     the blocks chunks, then the stop's blocks.
//   - chat.appendStream (channel, ts, markdown_text and/or chunks; neither: no_text),
//     chat.stopStream (channel, ts, markdown_text, chunks, blocks rendered at the bottom,
//     metadata stored as chat.postMessage's, session_status default active, applied to the
//     thread's agent session when it has one). Errors: message_not_found,
//     message_not_owned_by_app, message_not_in_streaming_state (not a stream, stopped,
//     or older than Options.StreamMaxAge, default 5m, or past Options.StreamMaxAppends),
//     stopped_by_user (an append or a stop after StopAgentSession halted the stream; Slack's
//     answer names nobody: agent_session_stopped says who), msg_too_long (over Options.StreamMaxCallChars,
//     default 12,000, in one call, or over Options.StreamMaxChars, default 40,000, in the
//     message: markdown plus task card text), msg_blocks_too_many (over 50 blocks in the
//     blocks chunks, or in the stop's blocks). A refused call changes nothing.
//   - chat.update of a streaming message answers streaming_state_conflict and
//     chat.delete cant_delete_message; once stopped or expired it is an ordinary message.
//   - SlackRateLimits: chat.startStream and chat.stopStream Tier 2, chat.appendStream
//     Tier 4 per channel (10 at once, then 100 a minute).
//   - StopAgentSession is the stop button: the thread's open streams end as
//     stopped_by_user (chat.update then works on them) and agent_session_stopped (channel, thread_ts, user,
//     streaming_message_ts, event_ts) is delivered when subscribed.
//
// # Driving it
//
// From Go: Post (user, channel, thread, broadcast, blocks, files, bot posts),
// Edit, Delete, ShareFile, DeleteFile, Join, SlashCommand, PublishEvent; UploadedFile,
// FileURL, Downloads, DownloadAttempts, InjectDownloadFault; Thread, History,
// Message, BotReplies, WaitForReply, WaitForReplies, Wait(ctx, cond); Acks,
// WaitForAck, Deliveries, DeliveryState, BadFrames; InjectDeliveryFault,
// InjectMethodFault, SetRateLimit, ClearFaults, FireRetries; Connections,
// ConnectionsOpened, Disconnect, DisconnectAll, DropConnection, Stall,
// SendRaw; Calls, Requests, Ephemerals, AssistantStatus, AssistantLoadingMessages,
// AgentSessionStatus, AgentSessionStatuses, ThreadTitle; Streams, StreamState,
// WaitStream, ExpireStream, StopAgentSession; AddUser, AddChannel, SetSubscriptions.
// A terminal (`logbook dev`) shows a reply growing by looping on WaitStream with the
// Version it last saw, printing the new part of Stream.Text and Stream.TaskLines
// ("[x] title: details → output"), until the stream is no longer Streaming; a
// one-off refusal is InjectMethodFault{Method: "chat.appendStream", Error:
// "message_not_in_streaming_state", Times: 1}, a real end ExpireStream. Waits are condition-based: they re-check after every state
// change and end with the context.
// From another process, JSON over HTTP under /_emu/ (errors are
// {"ok":false,"error":…} with 400, 404, 408 or 409):
//
//	POST /_emu/post            Post                                   → Posted
//	POST /_emu/edit            {"channel","ts","text"}                → Posted
//	POST /_emu/delete          {"channel","ts"}                       → Posted
//	POST /_emu/join            {"channel","user"}                     → Posted
//	POST /_emu/slash           SlashCommand                           → SlashResult
//	GET  /_emu/thread?channel=&ts=                                    → {"messages":[Message]}
//	GET  /_emu/wait_replies?channel=&ts=&n=&timeout_ms=               → {"messages":[Message]} (the bot's replies)
//	GET  /_emu/acks | deliveries | connections | ephemerals
//	GET  /_emu/calls?method=                                          → {"count","requests"}
//	POST /_emu/disconnect      {"conn_id":0,"reason":"refresh_requested"} (conn_id 0 = every socket)
//	POST /_emu/drop_connection {"conn_id"}
//	POST /_emu/raw             {"conn_id","frame"}
//	POST /_emu/method_fault    MethodFault
//	POST /_emu/delivery_fault  {"kind","delay_ms","event_type","times"}
//	POST /_emu/rate_limit      {"method","burst","every_ms","per_channel"}
//	POST /_emu/download_fault  {"file_id","status","times"}          (status 0 breaks the transfer)
//	POST /_emu/delete_file     {"file_id"}
//	GET  /_emu/file?id=                                              → {"file","content" (base64),"url","downloads","download_attempts"}
//	POST /_emu/clear_faults, /_emu/fire_retries
//
// # Not emulated (or only approximately)
//
//   - OAuth, scopes (missing_scope only via Options.RepliesForbidden or a fault),
//     token rotation, Enterprise Grid, shared channels, user tokens and user events.
//   - The exact retry timing, reasons other than "timeout", the 10-socket cap,
//     connection recycling after approximate_connection_time, and Slack's own
//     ping cadence (undocumented; ours is configurable).
//   - Whether Slack sends `message` events to channels the bot is not in for
//     other subscription kinds; member_joined_channel, reaction_added and other
//     events are not fired by actions (use PublishEvent).
//   - Rendering: mrkdwn, markdown_text (stored as text) and blocks are stored as
//     sent; user messages carry no generated rich_text blocks; links never unfurl
//     (so no unfurl message_changed); block validation covers only the limits
//     listed above; attachments are not validated.
//   - Streams (assumptions, from developers' live probes where Slack's pages are
//     silent): the ~5-minute absolute lifetime (measured ~306s), details appending, the
//     256-character titles, the 40,000-character total (reports range from ~12,000 to
//     ~40,000), streaming_state_conflict and cant_delete_message for an open stream;
//     invalid_thread_ts for a thread_ts naming no top-level message, and a missing
//     thread_ts streaming top-level, are choices. Not emulated: the ~30s idle stop some
//     report, Slack's markdown-to-rich_text rendering and the interleaving of text and
//     task cards in timeline mode, dense mode's grouping, icon/username overrides, the
//     ~2-minute expiry of an assistant status. Streams are not kept in
//     Options.StateFile (their messages are, no longer streaming).
//   - chat.update's 4,000-character limit follows its docs page; the unthreaded
//     post for a bad thread_ts and the response_url 404 after five uses are
//     choices, not verified against Slack.
//   - Files: Slack processes uploads asynchronously (the share message may appear a
//     moment after files.completeUploadExternal returns); the emulator shares at once.
//     The declared length is not checked against the bytes (Size is what arrived).
//     Thumbnails, previews, file comments, files.list, files.upload (sunset), remote
//     files, public URLs and file_shared/file_created/file_deleted events are not
//     emulated; a deletion fires no message_changed. Choices, not verified against
//     Slack: a second completion sharing again (its docs page says the method "can only
//     be called once" without saying what happens next), file_not_found for an
//     incomplete upload, 404 for an upload URL after completion, the filetype and
//     pretty_type names, and upload false on the app's own file shares.
//   - Interactive payloads, modals, views, chat.scheduleMessage, pins, bookmarks,
//     users.list and every method not listed above (answered
//     with unknown_method).
package slackemu
