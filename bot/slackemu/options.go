package slackemu

import (
	"cmp"
	"time"

	"github.com/rs/zerolog"
)

// Subscription names, as in an app manifest's settings.event_subscriptions.bot_events.
const (
	SubAppMention      = "app_mention"
	SubMessageChannels = "message.channels"
	SubMessageGroups   = "message.groups"
	SubMessageIM       = "message.im"
	SubMessageMPIM     = "message.mpim"
	// SubAgentSessionStopped is the event an agent app gets when a user presses the stop
	// button of a thread's agent session (Server.StopAgentSession).
	SubAgentSessionStopped = "agent_session_stopped"
	// SubAppHomeOpened is the event an app gets when a person opens its App Home
	// (Server.OpenAppHome).
	SubAppHomeOpened = "app_home_opened"
)

// Options configures a Server. The zero value is usable: every empty field gets
// the default documented on it (defaults are applied once, in New).
type Options struct {
	// Addr is the TCP address to listen on. Default "127.0.0.1:0" (a free port).
	Addr string
	// Logger receives connection and delivery logs. Tokens are never logged.
	// Default: zerolog.Nop().
	Logger *zerolog.Logger

	// TeamID default "T0000001"; TeamName default "Emu"; TeamDomain default "emu".
	TeamID, TeamName, TeamDomain string
	// BotUserID default "UB000001"; BotID default "B0000001"; AppID default "A0000001";
	// BotName default "logbook".
	BotUserID, BotID, AppID, BotName string
	// BotToken (xoxb-) default "xoxb-emu-bot-token"; AppToken (xapp-) default "xapp-1-A0000001-emu-app-token".
	BotToken, AppToken string

	// Users of the workspace besides the bot (the bot user is always added).
	// Default: U0000001 "ada", U0000002 "grace", and another app's bot user U0000009 "deploybot" (bot id B0000009).
	Users []User
	// Channels of the workspace. Default (bot = BotUserID):
	//   C0000001 #general  public,  members U0000001 U0000002 U0000009 bot
	//   C0000002 #secret   private, members U0000001 bot
	//   C0000003 #random   public,  members U0000001 U0000002 (bot not a member)
	//   C0000004 #old      public,  archived, members U0000001 bot
	//   D0000001           DM between U0000001 and the bot
	Channels []Channel
	// Subscriptions are the bot events the app subscribes to (Sub* constants).
	// Default: app_mention, message.channels, agent_session_stopped and the channel's life
	// (channel_shared, channel_unshared, channel_archive, channel_deleted, member_left_channel)
	// — what logbook subscribes to.
	Subscriptions []string

	// PingInterval is how often a WebSocket PING control frame is sent on each socket.
	// It must be below the client's socketmode.OptionPingInterval (slack-go default 30s). Default 5s.
	PingInterval time.Duration
	// AckTimeout is how long an envelope may stay unacked before its delivery counts as failed.
	// Default 3s (Slack's rule).
	AckTimeout time.Duration
	// RetrySchedule holds, for each retry, the wait after the failed attempt before it is sent;
	// its length is the number of retries. Default {0, 1m, 5m}: Slack's "nearly immediately, after
	// 1 minute, after 5 minutes", 3 retries.
	RetrySchedule []time.Duration
	// NoRetries disables retries entirely (RetrySchedule is then ignored).
	NoRetries bool
	// DisconnectGrace is how long a socket stays open after the server sent it a `disconnect`
	// frame (slack-go closes its side at once). Default 1s.
	DisconnectGrace time.Duration
	// RateLimits maps a Web API method (e.g. "chat.postMessage") to its limit. Methods not
	// listed are unlimited. Default: none. SlackRateLimits returns Slack-like tiers.
	RateLimits map[string]RateLimit
	// RepliesMaxLimit caps conversations.replies' limit parameter (and is its default).
	// Default 1000; Slack applies 15 to non-Marketplace apps created after 2025-05-29.
	RepliesMaxLimit int
	// HistoryMaxLimit caps conversations.history's limit parameter (its default is 100, or
	// the cap when lower). Default 999; Slack applies 15 (and 1 request a minute: see
	// NonMarketplaceLimits) to non-Marketplace apps created after 2025-05-29.
	HistoryMaxLimit int
	// RecordLimit caps each diagnostic record (Requests, Deliveries, Acks,
	// BadFrames) and the settled deliveries kept for DeliveryState; the oldest go
	// first. Default 100,000 — bounded memory for load tests and `logbook dev`.
	RecordLimit int
	// StateFile, when set, keeps the workspace across restarts in this file: users, channels
	// and their members, every message (threads, edits, reactions, files, metadata), every file
	// with its content (base64; pending uploads included) and the counters behind ts values
	// and ids. Start loads it when it exists (it then replaces
	// Users and Channels) and fails when it cannot be read or written; every change is saved
	// before the call that made it returns, atomically (a temporary file in the same
	// directory, synced, renamed over the old one). Deliveries, acks, ephemerals, response
	// URLs, download counts, faults and rate limits are not kept. Default "": the workspace
	// lives in memory only.
	StateFile string
	// RepliesForbidden makes conversations.replies answer missing_scope for channel threads,
	// as Slack's docs page claims it does for bot tokens.
	RepliesForbidden bool
	// FileAuthRedirect makes a file download without the bot token (or of a file the bot cannot
	// see) redirect to an HTML sign-in page (/signin?redir=<path>), as files.slack.com does,
	// instead of answering 403; slack-go's GetFile reports that redirect as an error.
	FileAuthRedirect bool
	// CanvasesDisabled turns canvases off in the workspace (a free team's, or an admin's
	// choice): canvases.create and canvases.access.set answer canvas_disabled_user_team.
	CanvasesDisabled bool

	// Streaming messages (chat.startStream, chat.appendStream, chat.stopStream).

	// StreamMaxAge is how long after chat.startStream a message accepts appends and its stop;
	// later calls answer message_not_in_streaming_state and the message stays as streamed so
	// far. Appends do not extend it. Default 5m: developers measure about 306s (Slack documents
	// no lifetime). Tests set a few milliseconds to exercise a rollover.
	StreamMaxAge time.Duration
	// StreamMaxAppends, when > 0, ends a stream after that many successful chat.appendStream
	// calls, as StreamMaxAge does (the next append answers message_not_in_streaming_state).
	// Default 0: no such limit (Slack has none; it is a test knob).
	StreamMaxAppends int
	// StreamMaxCallChars caps the markdown of one call (markdown_text plus markdown_text
	// chunks); more answers msg_too_long. Default 12,000 (the methods' docs pages).
	StreamMaxCallChars int
	// StreamMaxChars caps what one streamed message holds: its markdown plus the text of its
	// task cards (titles, details, output); a call that would pass it answers msg_too_long and
	// changes nothing. Default 40,000 (chat.postMessage's text limit, which public reports
	// of the stream cap match; one report saw the cap near 12,000 — set that to test it).
	StreamMaxChars int
}

// User is a member of the emulated workspace.
type User struct {
	ID       string `json:"id"`
	Name     string `json:"name"`
	RealName string `json:"real_name"`
	IsBot    bool   `json:"is_bot"`
	// BotID is set for app bot users (their posts carry it).
	BotID   string `json:"bot_id,omitempty"`
	Deleted bool   `json:"deleted"`
	TZ      string `json:"tz"`
	// Team is the user's own team: "" for this workspace's people, another team's id for a
	// person of another organisation in a Slack Connect channel.
	Team string `json:"team,omitempty"`
	// Email is the profile's email, shown by users.info as profile.email (a real workspace
	// shows it to apps with users:read.email); "" none.
	Email string `json:"email,omitempty"`
}

// Channel is a conversation of the emulated workspace.
type Channel struct {
	ID   string `json:"id"`
	Name string `json:"name"`
	// Private marks a private channel (channel_type "group"); IM a direct message
	// (channel_type "im"); MPIM a multi-person DM (channel_type "mpim").
	Private  bool `json:"private"`
	IM       bool `json:"im"`
	MPIM     bool `json:"mpim"`
	Archived bool `json:"archived"`
	// Members are user IDs; include the bot's user ID to make the bot a member.
	Members []string `json:"members"`
	// Slack Connect (connect.go): ExtShared marks a channel shared with another organisation;
	// HostTeam, when set to another team's id, makes that organisation its host (and the
	// channel shared); SharedTeams are the other teams it is shared with.
	ExtShared   bool     `json:"ext_shared,omitempty"`
	HostTeam    string   `json:"host_team,omitempty"`
	SharedTeams []string `json:"shared_teams,omitempty"`
}

// channelType is the Events API channel_type of c.
func (c Channel) channelType() string {
	switch {
	case c.IM:
		return "im"
	case c.MPIM:
		return "mpim"
	case c.Private:
		return "group"
	default:
		return "channel"
	}
}

// subscription is the message.* subscription that covers messages in c.
func (c Channel) subscription() string {
	switch c.channelType() {
	case "im":
		return SubMessageIM
	case "mpim":
		return SubMessageMPIM
	case "group":
		return SubMessageGroups
	default:
		return SubMessageChannels
	}
}

// RateLimit is a token bucket: Burst calls at once, then one call per Every.
// PerChannel keeps one bucket per channel parameter (as Slack does for chat.postMessage).
type RateLimit struct {
	Burst      int           `json:"burst"`
	Every      time.Duration `json:"every"`
	PerChannel bool          `json:"per_channel"`
}

// NonMarketplaceLimits are Slack's limits on reading history for apps outside the Slack
// Marketplace created after 2025-05-29: conversations.history and conversations.replies one
// request a minute. Use them with HistoryMaxLimit and RepliesMaxLimit 15.
func NonMarketplaceLimits() map[string]RateLimit {
	return map[string]RateLimit{
		"conversations.history": {Burst: 1, Every: time.Minute},
		"conversations.replies": {Burst: 1, Every: time.Minute},
	}
}

// SlackRateLimits returns limits shaped like Slack's published tiers (per minute:
// Tier 1 = 1, Tier 2 = 20, Tier 3 = 50, Tier 4 = 100; chat.postMessage ≈ 1/s per channel).
func SlackRateLimits() map[string]RateLimit {
	tier := func(perMinute int) RateLimit {
		return RateLimit{Burst: perMinute, Every: time.Minute / time.Duration(perMinute)}
	}
	return map[string]RateLimit{
		"apps.connections.open": tier(1),
		"chat.postMessage":      {Burst: 3, Every: time.Second, PerChannel: true},
		"chat.update":           tier(50),
		"chat.delete":           tier(50),
		"chat.getPermalink":     tier(100),
		"chat.postEphemeral":    tier(100),
		"conversations.info":    tier(50),
		"conversations.members": tier(50),
		"conversations.replies": tier(50),
		"conversations.history": tier(50),
		"users.info":            tier(100),
		"reactions.add":         tier(50),
		"reactions.remove":      tier(50),
		// Streams: startStream and stopStream are Tier 2, appendStream Tier 4 (the methods'
		// docs pages); appends are limited per channel, 10 at once then 100 a minute.
		"chat.startStream":  tier(20),
		"chat.appendStream": {Burst: 10, Every: time.Minute / 100, PerChannel: true},
		"chat.stopStream":   tier(20),
		// Files: the upload methods and files.info are Tier 4, files.delete Tier 3.
		"files.getUploadURLExternal":   tier(100),
		"files.completeUploadExternal": tier(100),
		"files.info":                   tier(100),
		"files.delete":                 tier(50),
		"files.list":                   tier(20),
		// Canvases: canvases.create is Tier 2, canvases.access.set and canvases.getContent
		// Tier 3.
		"canvases.create":     tier(20),
		"canvases.access.set": tier(50),
		"canvases.getContent": tier(50),
	}
}

func (o Options) withDefaults() Options {
	o.Addr = cmp.Or(o.Addr, "127.0.0.1:0")
	if o.Logger == nil {
		nop := zerolog.Nop()
		o.Logger = &nop
	}
	o.TeamID = cmp.Or(o.TeamID, "T0000001")
	o.TeamName = cmp.Or(o.TeamName, "Emu")
	o.TeamDomain = cmp.Or(o.TeamDomain, "emu")
	o.BotUserID = cmp.Or(o.BotUserID, "UB000001")
	o.BotID = cmp.Or(o.BotID, "B0000001")
	o.AppID = cmp.Or(o.AppID, "A0000001")
	o.BotName = cmp.Or(o.BotName, "logbook")
	o.BotToken = cmp.Or(o.BotToken, "xoxb-emu-bot-token")
	o.AppToken = cmp.Or(o.AppToken, "xapp-1-"+o.AppID+"-emu-app-token")
	if o.Users == nil {
		o.Users = []User{
			{ID: "U0000001", Name: "ada", RealName: "Ada Lovelace", TZ: "Europe/London"},
			{ID: "U0000002", Name: "grace", RealName: "Grace Hopper", TZ: "America/New_York"},
			{ID: "U0000009", Name: "deploybot", RealName: "Deploy Bot", IsBot: true, BotID: "B0000009", TZ: "UTC"},
		}
	}
	if o.Channels == nil {
		b := o.BotUserID
		o.Channels = []Channel{
			{ID: "C0000001", Name: "general", Members: []string{"U0000001", "U0000002", "U0000009", b}},
			{ID: "C0000002", Name: "secret", Private: true, Members: []string{"U0000001", b}},
			{ID: "C0000003", Name: "random", Members: []string{"U0000001", "U0000002"}},
			{ID: "C0000004", Name: "old", Archived: true, Members: []string{"U0000001", b}},
			{ID: "D0000001", IM: true, Members: []string{"U0000001", b}},
		}
	}
	if o.Subscriptions == nil {
		o.Subscriptions = []string{SubAppMention, SubMessageChannels, SubAgentSessionStopped,
			SubChannelShared, SubChannelUnshared, SubChannelArchive, SubChannelDeleted, SubMemberLeftChannel, SubAppHomeOpened}
	}
	o.PingInterval = cmp.Or(o.PingInterval, 5*time.Second)
	o.AckTimeout = cmp.Or(o.AckTimeout, 3*time.Second)
	if o.RetrySchedule == nil {
		o.RetrySchedule = []time.Duration{0, time.Minute, 5 * time.Minute}
	}
	if o.NoRetries {
		o.RetrySchedule = nil
	}
	o.DisconnectGrace = cmp.Or(o.DisconnectGrace, time.Second)
	o.RepliesMaxLimit = cmp.Or(o.RepliesMaxLimit, 1000)
	o.HistoryMaxLimit = cmp.Or(o.HistoryMaxLimit, 999)
	o.RecordLimit = cmp.Or(o.RecordLimit, 100_000)
	o.StreamMaxAge = cmp.Or(o.StreamMaxAge, 5*time.Minute)
	o.StreamMaxCallChars = cmp.Or(o.StreamMaxCallChars, 12_000)
	o.StreamMaxChars = cmp.Or(o.StreamMaxChars, 40_000)
	return o
}
