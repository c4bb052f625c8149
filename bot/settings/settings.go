// Package settings keeps each channel's settings as records: what an admin set with
// `/logbook config <name> <value>` (LOGBOOK_ADMINS) wins over the environment's default, and
// every change is an append-only row with who, when, and the old and new value
// (session.Store.SetChannelSetting). The turn reads a channel's effective settings once per
// turn (For) and records what it ran under (a turn_settings event).
//
// The settings, by name (exact, as /logbook config takes them):
//
//	model           LOGBOOK_MODEL syntax: anthropic:<model>, openai:<model> or offline
//	instructions    extra instructions, put in the system prompt after logbook's own rules
//	approvals       LOGBOOK_TOOL_APPROVAL syntax: tool=allow|ask|deny,… (ask with approvers:N, not_requester, approvers_in:S…); replaces the default policy in the channel
//	thread_replies  LOGBOOK_THREAD_REPLIES syntax: addressed, mentions or all
//	daily_budget    the channel's spend per day, in the prices' currency: "20", "12.50/day", or "none" (no budget)
//	setup           the repository's setup command, run once per provisioned sandbox (e.g. "npm ci")
//	review_on       which pull requests of the channel's repository start a review by webhook: auto, request or off
//	review_approve  whether the agent's reviews may approve: allow or never
//	canvas_over     a reply longer than this many characters is written as a canvas, linked from the thread; 0: never
//	surface         where a session that works on the repository talks: thread (default) or code_channel
//
// What other parts read (the budget and the setup step), through a narrow interface:
//
//	type Reader interface {
//		For(ctx context.Context, team, channel string) (Channel, error)
//	}
//	func (c Channel) DailyBudget() (perDay float64, ok bool) // ok false: no budget for the channel
//	func (c Channel) SetupCommand() string                   // "": none
//	func (c Channel) Value(name string) string               // any setting, effective, as text
//	func (c Channel) Record(name string) (session.ChannelSetting, bool) // the record that set it, if any
//
// *Settings is a Reader. A nil *Settings has no records: For returns the defaults only.
package settings

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/logbook/logbook/session"
)

// Names of the settings.
const (
	Model         = "model"
	Instructions  = "instructions"
	Approvals     = "approvals"
	ThreadReplies = "thread_replies"
	DailyBudget   = "daily_budget"
	Setup         = "setup"
	ReviewOn      = "review_on"
	ReviewApprove = "review_approve"
	CanvasOver    = "canvas_over"
	Surface       = "surface"
)

// Names is every setting, in the order /logbook config shows them.
var Names = []string{Model, Instructions, Approvals, ThreadReplies, DailyBudget, Setup, ReviewOn, ReviewApprove, CanvasOver, Surface}

// DefaultCanvasOver is canvas_over's own default, in characters.
const DefaultCanvasOver = 12000

// ParseCanvasOver reads a canvas_over value: a whole number of characters, 0 for never; ""
// is DefaultCanvasOver.
func ParseCanvasOver(s string) (int, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return DefaultCanvasOver, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 || n > 1_000_000 {
		return 0, fmt.Errorf("%q is not a number of characters from 0 (never) to 1000000", s)
	}
	return n, nil
}

// Values of review_on ("" is off): a pull request opened or pushed to in the channel's
// repository starts a review (auto), one where logbook's GitHub account is asked to review
// does (request), or none does (off; a person still asks with /logbook review).
const (
	ReviewAuto    = "auto"
	ReviewRequest = "request"
	ReviewOff     = "off"
)

// ReviewApproveAllow is the value of review_approve that lets a review approve ("" and
// "never": it comments only).
const ReviewApproveAllow = "allow"

// Values of surface ("" is thread): a session talks in its thread only (thread), or a session
// that works on the repository also gets a Slack code channel of its own (code_channel,
// bot/codechannel).
const (
	SurfaceThread      = "thread"
	SurfaceCodeChannel = "code_channel"
)

// Limits on values, in bytes.
const (
	MaxInstructions = 4000
	MaxSetup        = 1000
	maxOther        = 2000
)

// Reader is what other parts need of channel settings: the channel's effective ones.
type Reader interface {
	For(ctx context.Context, team, channel string) (Channel, error)
}

// Store keeps the records (*session.Store).
type Store interface {
	SetChannelSetting(ctx context.Context, c session.ChannelSetting) (session.ChannelSetting, error)
	ChannelSettingsAt(ctx context.Context, team, channel string) (map[string]session.ChannelSetting, session.Head, error)
	ChannelSettingsHistory(ctx context.Context, channel string) ([]session.ChannelSetting, error)
}

// Config configures Settings.
type Config struct {
	Store Store
	// Defaults are the environment's values by name ("" or absent: none), and DefaultFrom
	// names where each comes from, for people ("LOGBOOK_MODEL").
	Defaults    map[string]string
	DefaultFrom map[string]string
	// FromEnvironment are the settings whose default the environment sets (DefaultFrom's
	// variable is set), by name; the others' default is logbook's own (Report's sources).
	FromEnvironment map[string]bool
	// Check validates a value of the named setting whose syntax another part owns (model,
	// approvals, thread_replies); a setting without one takes any value within its limit. An
	// error's text is shown to the admin. A setting whose Check is ErrUnsupported's (see
	// Unsupported) cannot be set in this deployment.
	Check map[string]func(value string) error
	// Admins may change settings (LOGBOOK_ADMINS); anyone of the workspace may see them.
	Admins []string
	// Notes say what the admin should know of a setting's value just set or reset (a
	// daily_budget below one model call's worst case), given the channel's settings as they
	// now are; "" nothing. The value is kept either way.
	Notes map[string]func(c Channel) string
}

// ErrUnsupported is a Check's answer for a setting this deployment cannot honour.
var ErrUnsupported = errors.New("not supported by this deployment")

// Unsupported is a Check that refuses every value: why says what is missing.
func Unsupported(why string) func(string) error {
	return func(string) error { return fmt.Errorf("%w: %s", ErrUnsupported, why) }
}

// Settings resolves and changes channels' settings.
type Settings struct{ cfg Config }

// New returns Settings over cfg.
func New(cfg Config) *Settings { return &Settings{cfg: cfg} }

// Channel is a channel's effective settings: a record's value where the channel has one,
// else the default.
type Channel struct {
	Team, Channel string
	values        map[string]string
	records       map[string]session.ChannelSetting
	ledger        session.Head
}

// For returns the channel's effective settings. Errors are the store's. Within a turn's
// context (Within) the turn's own read of that channel is answered, without a round trip.
func (s *Settings) For(ctx context.Context, team, channel string) (Channel, error) {
	if t, ok := ctx.Value(turnKey{}).(turnSettings); ok && t.s == s && t.c.Team == team && t.c.Channel == channel {
		return t.c, nil
	}
	c := Channel{Team: team, Channel: channel, values: map[string]string{}, records: map[string]session.ChannelSetting{}}
	if s == nil {
		return c, nil
	}
	for _, n := range Names {
		c.values[n] = s.cfg.Defaults[n]
	}
	if s.cfg.Store == nil || channel == "" {
		return c, nil
	}
	recs, ledger, err := s.cfg.Store.ChannelSettingsAt(ctx, team, channel)
	if err != nil {
		return c, err
	}
	c.ledger = ledger
	for name, r := range recs {
		if r.Set && slices.Contains(Names, name) {
			c.values[name], c.records[name] = r.New, r
		}
	}
	return c, nil
}

// turnKey keys a turn's settings in its context.
type turnKey struct{}

// turnSettings are the settings a turn read, and of which Settings.
type turnSettings struct {
	s *Settings
	c Channel
}

// Within is ctx carrying c, the channel's settings a turn read (For) as it began: For on ctx,
// or a context derived from it, for c's channel answers c. What runs under the turn — the
// budget's meter for each model call, its notices, the setup step — reads the settings once
// per turn, not once each (issue 33: ~4.4 reads per message), and sees the same values the
// turn runs under. The next turn reads them again: a change takes effect on the next turn.
func (s *Settings) Within(ctx context.Context, c Channel) context.Context {
	return context.WithValue(ctx, turnKey{}, turnSettings{s: s, c: c})
}

// Ledger is the head of the channel's ledger when the settings were read (seq 0: none).
func (c Channel) Ledger() session.Head { return c.ledger }

// Value is the setting's effective value, "" when it has none.
func (c Channel) Value(name string) string { return c.values[name] }

// Record is the record that set name in the channel; false when it is the default.
func (c Channel) Record(name string) (session.ChannelSetting, bool) {
	r, ok := c.records[name]
	return r, ok
}

// DailyBudget is the channel's budget per day, in the prices' currency; ok false when the
// channel has none ("none", or nothing set and no default).
func (c Channel) DailyBudget() (perDay float64, ok bool) {
	v, err := ParseBudget(c.values[DailyBudget])
	if err != nil || v < 0 {
		return 0, false
	}
	return v, true
}

// SetupCommand is the repository's setup command, "" for none.
func (c Channel) SetupCommand() string { return strings.TrimSpace(c.values[Setup]) }

// ParseBudget reads a daily_budget value: a non-negative decimal amount, optionally followed
// by "/day" ("20", "12.50/day"); "none" (or "") is -1: no budget.
func ParseBudget(s string) (float64, error) {
	s = strings.TrimSpace(strings.ToLower(s))
	if s == "" || s == "none" {
		return -1, nil
	}
	num := strings.TrimSpace(strings.TrimSuffix(s, "/day"))
	v, err := strconv.ParseFloat(num, 64)
	if err != nil || v < 0 || v != v || v > 1e9 {
		return 0, fmt.Errorf("%q is not an amount per day (e.g. 20, 12.50/day, or none)", s)
	}
	return v, nil
}

// check validates value for name.
func (s *Settings) check(name, value string) error {
	if !slices.Contains(Names, name) {
		return fmt.Errorf("there is no setting %q (settings: %s)", name, strings.Join(Names, ", "))
	}
	if !utf8.ValidString(value) || strings.ContainsRune(value, 0) {
		return errors.New("the value is not valid text")
	}
	limit := maxOther
	switch name {
	case Instructions:
		limit = MaxInstructions
	case Setup:
		limit = MaxSetup
		if strings.ContainsAny(value, "\n\r") {
			return errors.New("the setup command is one line (join steps with &&)")
		}
	case DailyBudget:
		if _, err := ParseBudget(value); err != nil {
			return err
		}
	case ReviewOn:
		if !slices.Contains([]string{ReviewAuto, ReviewRequest, ReviewOff}, value) {
			return fmt.Errorf("%q: want auto, request or off", value)
		}
	case ReviewApprove:
		if value != ReviewApproveAllow && value != "never" {
			return fmt.Errorf("%q: want allow or never", value)
		}
	case CanvasOver:
		if _, err := ParseCanvasOver(value); err != nil {
			return err
		}
	case Surface:
		if value != SurfaceThread && value != SurfaceCodeChannel {
			return fmt.Errorf("%q: want thread or code_channel", value)
		}
	}
	if len(value) > limit {
		return fmt.Errorf("the value has %d bytes; at most %d", len(value), limit)
	}
	if f := s.cfg.Check[name]; f != nil {
		return f(value)
	}
	return nil
}

// Set records a change of the channel's setting name by an admin: value reset (set false)
// goes back to the default. It validates the value first; errors: a validation's (shown to
// the admin), or the store's.
func (s *Settings) Set(ctx context.Context, team, channel, name, value string, set bool, by string) (session.ChannelSetting, error) {
	if set {
		if err := s.check(name, value); err != nil {
			return session.ChannelSetting{}, &InvalidError{Name: name, Err: err}
		}
	} else if !slices.Contains(Names, name) {
		return session.ChannelSetting{}, &InvalidError{Name: name, Err: fmt.Errorf("there is no setting %q", name)}
	}
	return s.cfg.Store.SetChannelSetting(ctx, session.ChannelSetting{Team: team, Channel: channel, Name: name, New: value, Set: set, SetBy: by})
}

// InvalidError is a value Set refused; its text is for the admin.
type InvalidError struct {
	Name string
	Err  error
}

func (e *InvalidError) Error() string { return e.Name + ": " + e.Err.Error() }
func (e *InvalidError) Unwrap() error { return e.Err }

// defaultFrom says where a default comes from.
func (s *Settings) defaultFrom(name string) string {
	return cmp.Or(s.cfg.DefaultFrom[name], "logbook's default")
}

// Default is the environment's value of name, "" for none.
func (s *Settings) Default(name string) string {
	if s == nil {
		return ""
	}
	return s.cfg.Defaults[name]
}
