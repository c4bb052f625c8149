package bot

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/slack-go/slack"
)

// slackAPI is the part of slack-go's Web API client the bot uses.
type slackAPI interface {
	GetConversationInfoContext(ctx context.Context, input *slack.GetConversationInfoInput) (*slack.Channel, error)
	GetUserInfoContext(ctx context.Context, user string, options ...slack.GetUserInfoOption) (*slack.User, error)
	PostMessageContext(ctx context.Context, channelID string, options ...slack.MsgOption) (string, string, error)
	PostEphemeralContext(ctx context.Context, channelID, userID string, options ...slack.MsgOption) (string, error)
	GetConversationRepliesContext(ctx context.Context, params *slack.GetConversationRepliesParameters) ([]slack.Message, bool, string, error)
	GetConversationHistoryContext(ctx context.Context, params *slack.GetConversationHistoryParameters) (*slack.GetConversationHistoryResponse, error)
	AddReactionContext(ctx context.Context, name string, item slack.ItemRef) error
	RemoveReactionContext(ctx context.Context, name string, item slack.ItemRef) error
	GetPermalinkContext(ctx context.Context, params *slack.PermalinkParameters) (string, error)
	RenameAgentSessionContext(ctx context.Context, params slack.AgentSessionRenameParameters) (*slack.AgentSessionRenameResponse, error)
	SetAssistantThreadsTitleContext(ctx context.Context, params slack.AssistantThreadsSetTitleParameters) error
	SetAssistantThreadsStatusContext(ctx context.Context, params slack.AssistantThreadsSetStatusParameters) error
	SetAgentSessionStatusContext(ctx context.Context, params slack.AgentSessionSetStatusParameters) (*slack.AgentSessionSetStatusResponse, error)
	StartStreamContext(ctx context.Context, channelID string, options ...slack.MsgOption) (string, string, error)
	AppendStreamContext(ctx context.Context, channelID, timestamp string, options ...slack.MsgOption) (string, string, error)
	StopStreamContext(ctx context.Context, channelID, timestamp string, options ...slack.MsgOption) (string, string, error)
	UpdateMessageContext(ctx context.Context, channelID, timestamp string, options ...slack.MsgOption) (string, string, string, error)
	DeleteMessageContext(ctx context.Context, channel, messageTimestamp string) (string, string, error)
}

// Directory answers what the bot needs to know of channels now — names (for the system
// prompt), privacy and Slack Connect sharing (for every surface that shows logged content) —
// from conversations.info, cached.
type Directory struct{ d *directory }

// NewDirectory returns a Directory over api with answers cached for ttl.
func NewDirectory(api *slack.Client, ttl time.Duration) *Directory {
	return &Directory{d: newDirectory(api, ttl, time.Now)}
}

// NewDirectoryAt is NewDirectory on the clock now (tests move time on without sleeping).
func NewDirectoryAt(api *slack.Client, ttl time.Duration, now func() time.Time) *Directory {
	return &Directory{d: newDirectory(api, ttl, now)}
}

// ChannelName returns the channel's name, or "" when conversations.info fails.
func (d *Directory) ChannelName(ctx context.Context, id string) string {
	k, err := d.d.Channel(ctx, id)
	if err != nil {
		return ""
	}
	return k.Name
}

// UserName returns the person's display name (users.info, cached), or the id when it cannot
// be had.
func (d *Directory) UserName(ctx context.Context, id string) string { return d.d.UserName(ctx, id) }

// ChannelPrivate reports whether the channel is no longer a public channel, from an answer at
// most VisibilityMaxAge old (privacy.go).
func (d *Directory) ChannelPrivate(ctx context.Context, id string) (bool, error) {
	k, err := d.d.fresh(ctx, id, VisibilityMaxAge)
	if err != nil {
		return false, err
	}
	return !k.Public, nil
}

// ChannelExtShared reports whether the channel is shared with another organisation (Slack
// Connect, conversations.info is_ext_shared), from an answer at most VisibilityMaxAge old.
func (d *Directory) ChannelExtShared(ctx context.Context, id string) (bool, error) {
	k, err := d.d.fresh(ctx, id, VisibilityMaxAge)
	if err != nil {
		return false, err
	}
	return k.ExtShared, nil
}

// channelKind is what the bot needs to know of a conversation.
type channelKind struct {
	Public    bool // a public channel: not private, not a DM or group DM
	ExtShared bool // shared with another organisation (Slack Connect)
	Name      string
	Marked    bool // made private by an event, not yet asked again (privacy.go)
}

// directory caches conversations.info and users.info answers for a TTL.
type directory struct {
	api slackAPI
	ttl time.Duration
	now func() time.Time

	mu       sync.Mutex
	channels map[string]cached[channelKind]
	users    map[string]cached[string]
}

type cached[T any] struct {
	v  T
	at time.Time
}

func newDirectory(api slackAPI, ttl time.Duration, now func() time.Time) *directory {
	return &directory{api: api, ttl: ttl, now: now,
		channels: map[string]cached[channelKind]{}, users: map[string]cached[string]{}}
}

// Channel returns the channel's kind, from the cache or conversations.info. Privacy is
// decided by is_private / is_im / is_mpim, never by the id's prefix.
func (d *directory) Channel(ctx context.Context, id string) (channelKind, error) {
	d.mu.Lock()
	c, ok := d.channels[id]
	d.mu.Unlock()
	if ok && c.v.Name != "" && d.now().Sub(c.at) < d.ttl {
		return c.v, nil
	}
	if ok && c.v.Marked && d.now().Sub(c.at) < d.ttl {
		return c.v, nil // private by an event (forget)
	}
	return d.refresh(ctx, id)
}

// refresh asks conversations.info for the channel's kind and caches the answer.
func (d *directory) refresh(ctx context.Context, id string) (channelKind, error) {
	ch, err := d.api.GetConversationInfoContext(ctx, &slack.GetConversationInfoInput{ChannelID: id})
	if err != nil {
		return channelKind{}, fmt.Errorf("conversations.info %s: %w", id, err)
	}
	k := channelKind{Public: !ch.IsPrivate && !ch.IsIM && !ch.IsMpIM, ExtShared: ch.IsExtShared, Name: ch.Name}
	d.mu.Lock()
	d.channels[id] = cached[channelKind]{v: k, at: d.now()}
	d.mu.Unlock()
	return k, nil
}

// remember records a channel's kind learned from an event's channel_type. It leaves the age
// of what conversations.info said as it was: the directory is shared (pages, slash commands,
// cells), and a stream of messages must not keep a stale name or Slack Connect flag fresh.
func (d *directory) remember(id string, public bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	c, ok := d.channels[id]
	if !ok {
		c.at = d.now()
	}
	c.v.Public = public
	d.channels[id] = c
}

// UserName returns the user's display name (or real name, or name), falling back to the id
// when users.info fails: a name is a nicety, never a reason to lose a message.
func (d *directory) UserName(ctx context.Context, id string) string {
	d.mu.Lock()
	c, ok := d.users[id]
	d.mu.Unlock()
	if ok && d.now().Sub(c.at) < d.ttl {
		return c.v
	}
	// A name is looked up on the ack path: never wait long for it.
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	u, err := d.api.GetUserInfoContext(ctx, id)
	if err != nil {
		return id
	}
	name := u.Profile.DisplayName
	if name == "" {
		name = u.RealName
	}
	if name == "" {
		name = u.Name
	}
	if name == "" {
		name = id
	}
	d.mu.Lock()
	d.users[id] = cached[string]{v: name, at: d.now()}
	d.mu.Unlock()
	return name
}
