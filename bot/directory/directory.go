// Package directory answers what logbook needs to know of Slack's channels and people now,
// from conversations.info and users.info, cached: names (for the system prompt and the
// record), privacy and Slack Connect sharing (for every surface that shows logged content).
//
// Privacy changes, at once. A channel made private, shared with or unshared from another
// organisation, archived or deleted, or left by the bot, changes what every surface may show
// of its sessions (/logbook search, the agent's search_sessions tool, the web pages). The
// gateway follows those events — the message subtypes channel_convert_to_private and
// channel_convert_to_public, and channel_shared, channel_unshared, channel_archive,
// channel_deleted and member_left_channel (for the bot) — and drops the directory's
// conversations.info answer for the channel on each (a conversion to private is taken as
// private at once, before Slack is asked again). Every surface that shows content decides with
// the same Directory, from an answer at most VisibilityMaxAge old, so a replica that did not
// receive the event hides the channel within that time too.
package directory

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/slack-go/slack"
)

// VisibilityMaxAge is how old a conversations.info answer may be when a surface decides
// whether to show a channel's logged content (Directory.ChannelPrivate, ChannelExtShared).
const VisibilityMaxAge = 2 * time.Second

// Directory answers what the bot needs to know of channels now — names (for the system
// prompt), privacy and Slack Connect sharing (for every surface that shows logged content) —
// from conversations.info, cached.
type Directory struct {
	api API
	ttl time.Duration
	now func() time.Time

	mu       sync.Mutex
	channels map[string]cached[Kind]
	users    map[string]cached[string]
	people   map[string]cached[Person]
}

// API is what a Directory asks Slack (a *slack.Client).
type API interface {
	GetConversationInfoContext(ctx context.Context, input *slack.GetConversationInfoInput) (*slack.Channel, error)
	GetUserInfoContext(ctx context.Context, user string, options ...slack.GetUserInfoOption) (*slack.User, error)
}

// New returns a Directory over api with answers cached for ttl.
func New(api API, ttl time.Duration) *Directory { return NewAt(api, ttl, time.Now) }

// NewAt is New on the clock now (tests move time on without sleeping).
func NewAt(api API, ttl time.Duration, now func() time.Time) *Directory {
	return &Directory{api: api, ttl: ttl, now: now, channels: map[string]cached[Kind]{}, users: map[string]cached[string]{},
		people: map[string]cached[Person]{}}
}

// ChannelName returns the channel's name, or "" when conversations.info fails.
func (d *Directory) ChannelName(ctx context.Context, id string) string {
	k, err := d.Channel(ctx, id)
	if err != nil {
		return ""
	}
	return k.Name
}

// UserName returns the person's display name (users.info, cached), or the id when it cannot
// be had.

// ChannelPrivate reports whether the channel is no longer a public channel, from an answer at
// most VisibilityMaxAge old.
func (d *Directory) ChannelPrivate(ctx context.Context, id string) (bool, error) {
	k, err := d.fresh(ctx, id, VisibilityMaxAge)
	if err != nil {
		return false, err
	}
	return !k.Public, nil
}

// ChannelExtShared reports whether the channel is shared with another organisation (Slack
// Connect, conversations.info is_ext_shared), from an answer at most VisibilityMaxAge old.
func (d *Directory) ChannelExtShared(ctx context.Context, id string) (bool, error) {
	k, err := d.fresh(ctx, id, VisibilityMaxAge)
	if err != nil {
		return false, err
	}
	return k.ExtShared, nil
}

// Kind is what the bot needs to know of a conversation.
type Kind struct {
	Public    bool // a public channel: not private, not a DM or group DM
	ExtShared bool // shared with another organisation (Slack Connect)
	Name      string
	Marked    bool // made private by an event, not yet asked again (Forget)
}

type cached[T any] struct {
	v  T
	at time.Time
}

// Channel returns the channel's kind, from the cache or conversations.info. Privacy is
// decided by is_private / is_im / is_mpim, never by the id's prefix.
func (d *Directory) Channel(ctx context.Context, id string) (Kind, error) {
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
func (d *Directory) refresh(ctx context.Context, id string) (Kind, error) {
	ch, err := d.api.GetConversationInfoContext(ctx, &slack.GetConversationInfoInput{ChannelID: id})
	if err != nil {
		return Kind{}, fmt.Errorf("conversations.info %s: %w", id, err)
	}
	k := Kind{Public: !ch.IsPrivate && !ch.IsIM && !ch.IsMpIM, ExtShared: ch.IsExtShared, Name: ch.Name}
	d.mu.Lock()
	d.channels[id] = cached[Kind]{v: k, at: d.now()}
	d.mu.Unlock()
	return k, nil
}

// Remember records a channel's kind learned from an event's channel_type. It leaves the age
// of what conversations.info said as it was: the directory is shared (pages, slash commands,
// cells), and a stream of messages must not keep a stale name or Slack Connect flag fresh.
func (d *Directory) Remember(id string, public bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	c, ok := d.channels[id]
	if !ok {
		c.at = d.now()
	}
	c.v.Public = public
	d.channels[id] = c
}

// UserName returns the person's display name (or real name, or name; users.info, cached),
// falling back to the id when users.info fails: a name is a nicety, never a reason to lose a
// message.
func (d *Directory) UserName(ctx context.Context, id string) string {
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

// Person is what users.info says of a person for what logbook ships on their behalf: the
// name (real name, else display name, else handle) and the profile's email ("" when Slack does
// not show it: the app lacks users:read.email, or the person has none).
type Person struct {
	Name, Email string
}

// Person returns what users.info says of id (cached); an error when Slack does not answer.
func (d *Directory) Person(ctx context.Context, id string) (Person, error) {
	d.mu.Lock()
	c, ok := d.people[id]
	d.mu.Unlock()
	if ok && d.now().Sub(c.at) < d.ttl {
		return c.v, nil
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	u, err := d.api.GetUserInfoContext(ctx, id)
	if err != nil {
		return Person{}, fmt.Errorf("users.info %s: %w", id, err)
	}
	p := Person{Name: u.RealName, Email: u.Profile.Email}
	if p.Name == "" {
		p.Name = u.Profile.DisplayName
	}
	if p.Name == "" {
		p.Name = u.Name
	}
	d.mu.Lock()
	d.people[id] = cached[Person]{v: p, at: d.now()}
	d.mu.Unlock()
	return p, nil
}

// Forget drops what conversations.info said of the channel; private records it as private
// until Slack is asked again (a conversion to private, a deletion).
func (d *Directory) Forget(id string, private bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !private {
		delete(d.channels, id)
		return
	}
	c := d.channels[id]
	c.v.Public, c.v.Marked, c.at = false, true, d.now()
	d.channels[id] = c
}

// fresh returns the channel's kind from an answer at most maxAge old.
func (d *Directory) fresh(ctx context.Context, id string, maxAge time.Duration) (Kind, error) {
	d.mu.Lock()
	c, ok := d.channels[id]
	d.mu.Unlock()
	if ok && c.v.Name != "" && d.now().Sub(c.at) < maxAge {
		return c.v, nil
	}
	if ok && c.v.Marked && d.now().Sub(c.at) < maxAge {
		return c.v, nil // made private by an event: no need to ask yet
	}
	return d.refresh(ctx, id)
}
