// Package part is how a turn's optional parts plug into it. A Part is offered each turn that
// runs the agent once, just before its first model call, and answers with an Offer: the
// tools it gives the model, what it adds to the system prompt, its fields of the turn's
// turn_settings record, and the lines it puts under the reply. A turn that needs no model (a
// canned reply, a reply a dead cell wrote and left undelivered) offers nothing. The turn loops
// over the parts cmd/logbook lists (bot.Deps.Parts), in order; it knows none of them by name.
//
// Three optional interfaces reach every turn that answers, whether or not it runs the agent:
// a Settler settles what a dead cell left of the part's own before anything is delivered, a
// Footer reads the lines it puts under whatever reply the turn delivers, and a Presenter may
// show the model's reply in the thread as other text (a canvas's link).
//
// A part keeps nothing of the turn's: what it needs is in the Scope, and what it must keep
// for the length of a cell (a connection, a started server) it keeps in Scope.Cell, which
// closes it when the cell ends.
package part

import (
	"context"
	"sync"

	"github.com/rs/zerolog"

	"github.com/logbook/logbook/bot/brain"
	"github.com/logbook/logbook/sandbox"
	"github.com/logbook/logbook/session"
)

// Part is one optional part of a turn.
type Part interface {
	// Offer is what the part gives the turn s. An error ends the turn, which stays open and
	// is resumed: only the log's (an append refused as fenced) or ctx's. A part that can go
	// without its offer (a store that is down leaves its tool out, not the reply) logs why
	// and returns no error.
	Offer(ctx context.Context, s Scope) (Offer, error)
}

// Func is a Part that is a function.
type Func func(ctx context.Context, s Scope) (Offer, error)

// Offer calls f.
func (f Func) Offer(ctx context.Context, s Scope) (Offer, error) { return f(ctx, s) }

// Settler is a Part that settles what a dead cell left of its own (an upload recorded but
// not shared) before the turn goes on, on every turn that answers. An error is the log's or
// ctx's and ends the turn.
type Settler interface {
	Settle(ctx context.Context, s Scope) error
}

// Footer is a Part that puts lines under every reply a turn delivers (the pull requests it
// opened), read from the log when the reply is delivered — also a reply a dead cell wrote,
// which no Offer preceded.
type Footer interface {
	Footer(s Scope) []string
}

// Presenter is a Part that may show a reply in the thread otherwise than as its own text (a
// long answer written elsewhere and linked): Present returns the text the thread shows in
// its place, ok false for the reply as it is. It is asked on every reply the model wrote that
// a turn delivers, before it is posted or its live view finished — also a reply a dead cell
// wrote, which no Offer preceded; so it finds what it did before in s.Log, and records what
// it does before it returns (the reply's message is posted after that). The first Presenter
// that answers ok wins. An error is the log's, ctx's, or one that may pass: the turn stays
// open and is resumed. A Presenter that cannot do its work for good logs why and answers ok
// false: the reply is shown as it is.
type Presenter interface {
	Present(ctx context.Context, s Scope, reply session.Event) (text string, ok bool, err error)
}

// Scope is what a turn knows when its parts are offered.
type Scope struct {
	Session session.Session
	// Turn is the seq of the turn's turn_started; Through the last user message it answers;
	// Requester the Slack user who wrote it; BotUser the bot's user id (the actor of what
	// the agent writes).
	Turn      int64
	Through   int64
	Requester string
	BotUser   string
	// Channel is the channel's settings as the turn read them (a settings.Channel); nil when
	// the deployment keeps none.
	Channel Settings
	// Log is the session's log, fenced by the cell's lease: an append after the lease moved
	// fails with session.ErrFenced.
	Log Log
	// Hands is the session's sandbox (nil: none), provisioned on first use.
	Hands Hands
	// Cell keeps what a part holds for the length of the cell.
	Cell   *Cell
	Logger zerolog.Logger
}

// Settings is a channel's settings (settings.Channel): a setting's value, and the record
// that set it (false: the deployment's default).
type Settings interface {
	Value(name string) string
	Record(name string) (session.ChannelSetting, bool)
}

// Log is the session's log as the cell reads it.
type Log interface {
	brain.Log
	// Snapshot is the log as the cell last read it, its own appends included, oldest first:
	// no round trip. It must not be modified.
	Snapshot() []session.Event
}

// Hands is the session's sandbox as the parts use it: the brain's tools' calls, and
// long-lived processes (a local MCP server). Start gives sandbox.ErrDisabled where the
// sandbox cannot start one.
type Hands interface {
	brain.Hands
	Start(ctx context.Context, req sandbox.StartRequest) (*sandbox.Process, error)
}

// Offer is what a part gives one turn. Every field may be left empty.
type Offer struct {
	Tools    []brain.Tool
	Toolsets []brain.Toolset
	// Guidance is added to the turn's system prompt (brain.Guidance): the fields a part sets
	// are the ones it owns.
	Guidance brain.Guidance
	// Settings fills in the part's fields of the turn's turn_settings record; a part that
	// sets it says the turn has settings worth recording.
	Settings func(rec *session.TurnSettings)
	// Asks reports the tools of this part a person must approve before each call, even where
	// the approvals policy allows them (an MCP server's approve patterns).
	Asks func(tool string) bool
	// Notes are lines under the turn's reply, known now (a failed setup).
	Notes []string
	// Answered is called once the agent answered, before the reply is delivered: what it
	// records, it records (a budget notice); the lines it returns go under the reply. An
	// error is the log's: the turn stays open and is resumed.
	Answered func(ctx context.Context) ([]string, error)
	// Waiting is called with true when the turn starts waiting for a person (it posted an
	// approval request), and with false when a decision ends the wait; a turn that suspends
	// instead stays waiting. Best effort: it returns nothing, and must not block long.
	Waiting func(ctx context.Context, waiting bool)
	// Steered is called when messages written while the turn runs join it (steering), up
	// to the user message at through, before the model reads them (their shared files). An
	// error is the log's.
	Steered func(ctx context.Context, through int64) error
}

// Cell keeps what parts hold for the length of one cell (a session's worker): a value per
// key, made on first use, closed when the cell ends (before its sandbox closes). Safe for
// concurrent use.
type Cell struct {
	// Log is the cell's logger, for what a part keeps for the cell's length (a turn's
	// logger names that turn).
	Log zerolog.Logger

	mu     sync.Mutex
	vals   map[any]any
	closes []func()
	closed bool
}

// Value is the cell's value for key, made by open on first use; close, when open returns
// one, is called when the cell ends. A cell that has ended makes nothing: ok is false.
func (c *Cell) Value(key any, open func() (v any, close func())) (v any, ok bool) {
	if c == nil {
		return nil, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, false
	}
	if v, ok := c.vals[key]; ok {
		return v, true
	}
	v, closer := open()
	if c.vals == nil {
		c.vals = map[any]any{}
	}
	c.vals[key] = v
	if closer != nil {
		c.closes = append(c.closes, closer)
	}
	return v, true
}

// Close closes the cell's values, the last made first. Later calls do nothing.
func (c *Cell) Close() {
	if c == nil {
		return
	}
	c.mu.Lock()
	closes := c.closes
	c.closes, c.vals, c.closed = nil, nil, true
	c.mu.Unlock()
	for i := len(closes) - 1; i >= 0; i-- {
		closes[i]()
	}
}
