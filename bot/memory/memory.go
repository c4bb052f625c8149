// Package memory is a channel's memory you can audit: notes added by the agent (its remember
// tool, in a named session) or by a person (`/logbook remember <text>`), each with its text,
// who asked, when and from which thread; offered to the model in the channel's sessions
// (bounded, newest first); listed with `/logbook memory` and removed with
// `/logbook forget <id>`. Every note and every removal is an append-only row
// (session.Store.AddNote, ForgetNote); a removed note, or one retention purged
// (logbook_purge_memory, under the legal holds), is never offered again.
package memory

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/logbook/logbook/bot/slashcmd"
	"github.com/logbook/logbook/session"
)

// Store keeps the notes (*session.Store).
type Store interface {
	AddNote(ctx context.Context, n session.Note) (session.Note, error)
	ForgetNote(ctx context.Context, team, channel string, id int64, by string) (time.Time, error)
	Notes(ctx context.Context, team, channel string, all bool, limit int) ([]session.Note, error)
}

// Defaults of Config.
const (
	DefaultOffer      = 20      // notes offered to a session, newest first
	DefaultOfferBytes = 8 << 10 // bytes of notes' text offered in all
)

// Config configures Memory. Zero values take the defaults.
type Config struct {
	Offer      int // notes offered at most
	OfferBytes int // bytes of text offered at most
}

// Memory is the channels' memory.
type Memory struct {
	store Store
	cfg   Config
}

// New returns a Memory over store.
func New(store Store, cfg Config) *Memory {
	cfg.Offer = cmp.Or(cfg.Offer, DefaultOffer)
	cfg.OfferBytes = cmp.Or(cfg.OfferBytes, DefaultOfferBytes)
	return &Memory{store: store, cfg: cfg}
}

// ErrInvalid is a note that cannot be kept (empty, too long, not text); its text says why.
var ErrInvalid = errors.New("invalid note")

// Remember adds n to its channel's memory. Errors: ErrInvalid (for the person or the model to
// read), or the store's.
func (m *Memory) Remember(ctx context.Context, n session.Note) (session.Note, error) {
	n.Text = strings.TrimSpace(n.Text)
	switch {
	case n.Text == "":
		return n, fmt.Errorf("%w: say what to remember", ErrInvalid)
	case !utf8.ValidString(n.Text) || strings.ContainsRune(n.Text, 0):
		return n, fmt.Errorf("%w: the note is not valid text", ErrInvalid)
	case len(n.Text) > session.MaxNoteText:
		return n, fmt.Errorf("%w: a note has at most %d bytes (this one has %d); keep it short", ErrInvalid, session.MaxNoteText, len(n.Text))
	case !strings.HasPrefix(n.Channel, "C") && !strings.HasPrefix(n.Channel, "G"):
		return n, fmt.Errorf("%w: memory belongs to a channel", ErrInvalid)
	}
	return m.store.AddNote(ctx, n)
}

// Offer is the notes offered to the model in the channel's sessions: neither forgotten nor
// purged, newest first, at most Config.Offer and Config.OfferBytes of text.
func (m *Memory) Offer(ctx context.Context, team, channel string) ([]session.Note, error) {
	if m == nil {
		return nil, nil
	}
	ns, err := m.store.Notes(ctx, team, channel, false, m.cfg.Offer)
	if err != nil {
		return nil, err
	}
	left := m.cfg.OfferBytes
	for i, n := range ns {
		if left -= len(n.Text); left < 0 {
			return ns[:i], nil
		}
	}
	return ns, nil
}

// Commands are `/logbook remember <text>`, `/logbook memory` and `/logbook forget <id>`, for
// the people of the workspace's organisation only (people of other organisations, Slack
// Connect, may not change the channel's memory), in public channels only: private asks Slack
// whether a channel is private (nil: every C… channel counts as public), and logbook keeps
// nothing of a private channel's, its notes included. m nil: memory is off, and they say so.
func Commands(m *Memory, private func(ctx context.Context, channel string) (bool, error)) []slashcmd.Command {
	run := func(do func(m *Memory, ctx context.Context, team, channel, user, args string) string) func(context.Context, slashcmd.Call) string {
		return func(ctx context.Context, c slashcmd.Call) string {
			if !strings.HasPrefix(c.ChannelID, "C") && !strings.HasPrefix(c.ChannelID, "G") {
				return "Memory belongs to a channel: use it in the channel."
			}
			closed := strings.HasPrefix(c.ChannelID, "G") // a private channel of Slack's older kind
			if !closed && private != nil {
				var err error
				if closed, err = private(ctx, c.ChannelID); err != nil {
					return "I cannot tell whether this channel is public right now, so nothing was read or kept; try again."
				}
			}
			if closed {
				return "This channel is private: logbook keeps nothing of private channels, so it has no memory here and keeps no note."
			}
			return do(m, ctx, c.Team, c.ChannelID, c.UserID, c.Args)
		}
	}
	cmds := []slashcmd.Command{
		{Name: "remember", Usage: helpLine, Run: run((*Memory).rememberCommand)},
		{Name: "memory", Run: run(func(m *Memory, ctx context.Context, team, channel, _, _ string) string {
			return m.list(ctx, team, channel)
		})},
		{Name: "forget", Run: run((*Memory).forgetCommand)},
	}
	for i := range cmds {
		if m == nil {
			cmds[i].Run = func(context.Context, slashcmd.Call) string { return "Channel memory is off in this deployment." }
			continue
		}
		cmds[i].Who = slashcmd.Home
		cmds[i].Refusal = "Only people of this workspace's organisation may see or change a channel's memory."
	}
	return cmds
}

const helpLine = "`/logbook remember <text>` adds a note to this channel's memory (offered to me in new threads); `/logbook memory` lists the notes, `/logbook forget <id>` removes one."

func (m *Memory) rememberCommand(ctx context.Context, team, channel, user, text string) string {
	if text == "" {
		return "Say what to remember: `/logbook remember <text>`."
	}
	n, err := m.Remember(ctx, session.Note{Team: team, Channel: channel, Text: text, ByKind: session.NoteByUser, By: user})
	switch {
	case errors.Is(err, ErrInvalid):
		return "Not remembered: " + strings.TrimPrefix(err.Error(), ErrInvalid.Error()+": ") + "."
	case err != nil:
		return "The note could not be saved; try again."
	}
	return fmt.Sprintf("Remembered as note %d (by <@%s>): new threads of this channel are offered it. `/logbook forget %d` removes it.", n.ID, user, n.ID)
}

func (m *Memory) forgetCommand(ctx context.Context, team, channel, user, arg string) string {
	id, err := strconv.ParseInt(strings.TrimPrefix(arg, "#"), 10, 64)
	if err != nil || id <= 0 {
		return "Say which note: `/logbook forget <id>` (`/logbook memory` lists them with their ids)."
	}
	_, err = m.store.ForgetNote(ctx, team, channel, id, user)
	switch {
	case errors.Is(err, session.ErrNotFound):
		return fmt.Sprintf("This channel has no note %d.", id)
	case errors.Is(err, session.ErrForgotten):
		return fmt.Sprintf("Note %d was removed already.", id)
	case err != nil:
		return "The note could not be removed; try again."
	}
	return fmt.Sprintf("Note %d is forgotten (by <@%s>): it is never offered again.", id, user)
}

func (m *Memory) list(ctx context.Context, team, channel string) string {
	ns, err := m.store.Notes(ctx, team, channel, false, 50)
	if err != nil {
		return "The channel's memory cannot be read right now."
	}
	if len(ns) == 0 {
		return "This channel's memory is empty. `/logbook remember <text>` adds a note."
	}
	var sb strings.Builder
	sb.WriteString("*This channel's memory*, newest first (offered to me in new threads):\n")
	for _, n := range ns {
		fmt.Fprintf(&sb, "• %d — %s (%s, %s)\n", n.ID, escape(clip(n.Text, 300)), Who(n), n.At.UTC().Format("2006-01-02 15:04 UTC"))
	}
	sb.WriteString("`/logbook forget <id>` removes one.")
	return sb.String()
}

// Who says who asked for a note, for people and for the model.
func Who(n session.Note) string {
	if n.ByKind == session.NoteByAgent {
		s := "the agent"
		if n.Session != (session.ID{}) {
			s += " in session " + n.Session.String()
		}
		return s
	}
	return "<@" + n.By + ">"
}

func escape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(s)
}

func clip(s string, n int) string {
	if r := []rune(s); len(r) > n {
		return string(r[:n]) + "…"
	}
	return s
}
