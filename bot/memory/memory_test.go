package memory_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/slack-go/slack"
	"go.uber.org/goleak"

	"github.com/logbook/logbook/bot/memory"
	"github.com/logbook/logbook/bot/slashcmd"
	"github.com/logbook/logbook/session"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// memStore is an in-memory Store that behaves like session.Store's notes.
type memStore struct {
	mu        sync.Mutex
	notes     []session.Note
	forgotten map[int64]string
}

func (m *memStore) AddNote(_ context.Context, n session.Note) (session.Note, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	n.ID, n.At = int64(len(m.notes)+1), time.Date(2026, 12, 1, 12, 0, len(m.notes), 0, time.UTC)
	m.notes = append(m.notes, n)
	return n, nil
}

func (m *memStore) ForgetNote(_ context.Context, team, channel string, id int64, by string) (time.Time, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if id < 1 || id > int64(len(m.notes)) || m.notes[id-1].Channel != channel {
		return time.Time{}, session.ErrNotFound
	}
	if m.forgotten == nil {
		m.forgotten = map[int64]string{}
	}
	if _, ok := m.forgotten[id]; ok {
		return time.Time{}, session.ErrForgotten
	}
	m.forgotten[id] = by
	return time.Now(), nil
}

func (m *memStore) Notes(_ context.Context, team, channel string, all bool, limit int) ([]session.Note, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []session.Note
	for i := len(m.notes) - 1; i >= 0 && len(out) < limit; i-- {
		n := m.notes[i]
		if _, gone := m.forgotten[n.ID]; n.Channel == channel && (all || !gone) {
			out = append(out, n)
		}
	}
	return out, nil
}

// Offer is bounded by count and by bytes, newest first; bad notes are refused.
func TestOfferIsBoundedNewestFirst(t *testing.T) {
	t.Parallel()
	st := &memStore{}
	m := memory.New(st, memory.Config{Offer: 3, OfferBytes: 25})
	ctx := context.Background()
	for _, text := range []string{"one", "two", "three ten chars", "four ten chars"} {
		if _, err := m.Remember(ctx, session.Note{Team: "T1", Channel: "C1", Text: text, ByKind: session.NoteByUser, By: "U1"}); err != nil {
			t.Fatal(err)
		}
	}
	got, err := m.Offer(ctx, "T1", "C1")
	if err != nil || len(got) != 1 || got[0].Text != "four ten chars" {
		t.Fatalf("by bytes: %+v %v", got, err)
	}
	m = memory.New(st, memory.Config{Offer: 2})
	if got, _ := m.Offer(ctx, "T1", "C1"); len(got) != 2 || got[1].Text != "three ten chars" {
		t.Fatalf("by count: %+v", got)
	}
	for _, bad := range []session.Note{{Channel: "C1", Text: "  "}, {Channel: "C1", Text: strings.Repeat("x", session.MaxNoteText+1)},
		{Channel: "D1", Text: "dm"}, {Channel: "C1", Text: "a\x00"}} {
		if _, err := m.Remember(ctx, bad); !errors.Is(err, memory.ErrInvalid) {
			t.Errorf("%+v: %v", bad, err)
		}
	}
	var nilMemory *memory.Memory
	if got, err := nilMemory.Offer(ctx, "T1", "C1"); got != nil || err != nil {
		t.Fatalf("nil memory: %v %v", got, err)
	}
}

// /logbook remember, memory and forget; other subcommands go to next.
func TestMemoryCommands(t *testing.T) {
	t.Parallel()
	st := &memStore{}
	next := slashcmd.Command{Name: "repo", Run: func(context.Context, slashcmd.Call) string { return "next" }}
	private := func(_ context.Context, channel string) (bool, error) {
		switch channel {
		case "C0000001":
			return false, nil
		case "CPRIVATE1":
			return true, nil
		}
		return false, errors.New("conversations.info: ratelimited")
	}
	h := slashcmd.New("T1", slashcmd.Help{}).Add(next).Add(memory.Commands(memory.New(st, memory.Config{}), private)...).Answer
	in := func(channel, team, text string) string {
		return h(context.Background(), slack.SlashCommand{Text: text, UserID: "U1", TeamID: team, ChannelID: channel})
	}
	run := func(team, text string) string { return in("C0000001", team, text) }
	// A private channel keeps no note, whether Slack says so or its id does; a channel whose
	// visibility cannot be read keeps none either.
	for _, c := range [][2]string{{"CPRIVATE1", "This channel is private"}, {"G0000001", "This channel is private"}, {"CUNKNOWN1", "cannot tell whether this channel is public"}} {
		for _, text := range []string{"remember the deploy key is in vault", "memory", "forget 1"} {
			if got := in(c[0], "T1", text); !strings.Contains(got, c[1]) {
				t.Errorf("%s in %s: %q, want %q", text, c[0], got, c[1])
			}
		}
	}
	if len(st.notes) != 0 {
		t.Fatalf("a private channel's note was kept: %+v", st.notes)
	}
	if got := run("T1", "repo"); got != "next" {
		t.Fatalf("passed on: %q", got)
	}
	if got := run("T1", "memory"); !strings.Contains(got, "empty") {
		t.Fatalf("empty: %q", got)
	}
	if got := run("T1", "remember"); !strings.Contains(got, "Say what to remember") {
		t.Fatalf("no text: %q", got)
	}
	if got := run("T2", "remember x"); !strings.Contains(got, "Only people of this workspace") || len(st.notes) != 0 {
		t.Fatalf("another organisation: %q", got)
	}
	if got := run("T1", "remember CI runs on <buildkite>"); !strings.Contains(got, "Remembered as note 1 (by <@U1>)") {
		t.Fatalf("remember: %q", got)
	}
	if got := run("T1", "memory"); !strings.Contains(got, "• 1 — CI runs on &lt;buildkite&gt; (<@U1>, 2026-12-01 12:00 UTC)") {
		t.Fatalf("list: %q", got)
	}
	for _, c := range [][2]string{{"forget x", "Say which note"}, {"forget 9", "no note 9"}, {"forget 1", "is forgotten"}, {"forget #1", "removed already"}} {
		if text, want := c[0], c[1]; !strings.Contains(run("T1", text), want) {
			t.Errorf("%s: want %q", text, want)
		}
	}
	if got := run("T1", "memory"); !strings.Contains(got, "empty") {
		t.Fatalf("after forget: %q", got)
	}
}
