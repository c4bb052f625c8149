package settings_test

import (
	"context"
	"crypto/sha256"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/slack-go/slack"
	"go.uber.org/goleak"

	"github.com/logbook/logbook/bot/settings"
	"github.com/logbook/logbook/bot/slashcmd"
	"github.com/logbook/logbook/session"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// memStore is an in-memory Store that behaves like session.Store's records.
type memStore struct {
	mu   sync.Mutex
	rows []session.ChannelSetting
	err  error
}

func (m *memStore) SetChannelSetting(_ context.Context, c session.ChannelSetting) (session.ChannelSetting, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for i := len(m.rows) - 1; i >= 0; i-- {
		if r := m.rows[i]; r.Team == c.Team && r.Channel == c.Channel && r.Name == c.Name {
			c.Old, c.OldSet = r.New, r.Set
			break
		}
	}
	c.ID, c.SetAt = int64(len(m.rows)+1), time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	m.rows = append(m.rows, c)
	return c, nil
}

// ChannelSettingsAt's ledger head is the channel's count of changes, its hash that count's
// sha256 (the real ledger also holds other changes; a fake of the settings has only these).
func (m *memStore) ChannelSettingsAt(_ context.Context, team, channel string) (map[string]session.ChannelSetting, session.Head, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.err != nil {
		return nil, session.Head{}, m.err
	}
	out := map[string]session.ChannelSetting{}
	var head session.Head
	for _, r := range m.rows {
		if r.Channel == channel {
			head.Seq++
			sum := sha256.Sum256([]byte(strconv.FormatInt(head.Seq, 10)))
			head.Hash = sum[:]
		}
		if r.Team == team && r.Channel == channel {
			out[r.Name] = r
		}
	}
	return out, head, nil
}

func (m *memStore) ChannelSettingsHistory(_ context.Context, channel string) ([]session.ChannelSetting, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []session.ChannelSetting
	for _, r := range m.rows {
		if channel == "" || r.Channel == channel {
			out = append(out, r)
		}
	}
	return out, nil
}

func newSettings(st *memStore) *settings.Settings {
	return settings.New(settings.Config{Store: st,
		Defaults:    map[string]string{settings.Model: "anthropic:default", settings.DailyBudget: "20"},
		DefaultFrom: map[string]string{settings.Model: "LOGBOOK_MODEL"},
		Check: map[string]func(string) error{settings.Model: func(v string) error {
			if !strings.Contains(v, ":") {
				return errors.New("want provider:model")
			}
			return nil
		}},
		Admins: []string{"U0ADMIN"}})
}

// A channel's record wins over the default; a reset goes back to it; the budget and setup
// accessors read the effective values.
func TestEffectiveSettingsRecordWinsOverDefault(t *testing.T) {
	t.Parallel()
	st := &memStore{}
	s := newSettings(st)
	ctx := context.Background()
	c, err := s.For(ctx, "T1", "C1")
	if err != nil || c.Value(settings.Model) != "anthropic:default" || c.SetupCommand() != "" {
		t.Fatalf("defaults: %+v %v", c, err)
	}
	if b, ok := c.DailyBudget(); !ok || b != 20 {
		t.Fatalf("default budget: %v %v", b, ok)
	}
	for _, kv := range [][2]string{{settings.Model, "openai:gpt-x"}, {settings.Setup, "npm ci"}, {settings.DailyBudget, "none"}} {
		if _, err := s.Set(ctx, "T1", "C1", kv[0], kv[1], true, "U0ADMIN"); err != nil {
			t.Fatal(err)
		}
	}
	c, _ = s.For(ctx, "T1", "C1")
	if r, ok := c.Record(settings.Model); c.Value(settings.Model) != "openai:gpt-x" || !ok || r.SetBy != "U0ADMIN" || c.SetupCommand() != "npm ci" {
		t.Fatalf("records: %+v", c)
	}
	if _, ok := c.DailyBudget(); ok {
		t.Fatal("daily_budget none still a budget")
	}
	if other, _ := s.For(ctx, "T1", "C2"); other.Value(settings.Model) != "anthropic:default" {
		t.Fatal("another channel got the record")
	}
	if _, err := s.Set(ctx, "T1", "C1", settings.Model, "", false, "U0ADMIN"); err != nil {
		t.Fatal(err)
	}
	if c, _ = s.For(ctx, "T1", "C1"); c.Value(settings.Model) != "anthropic:default" {
		t.Fatalf("after reset: %q", c.Value(settings.Model))
	}
	st.err = errors.New("db down")
	if _, err := s.For(ctx, "T1", "C1"); err == nil {
		t.Fatal("a store error is not returned")
	}
	var nilSettings *settings.Settings
	if c, err := nilSettings.For(ctx, "T1", "C1"); err != nil || c.Value(settings.Model) != "" {
		t.Fatalf("nil settings: %+v %v", c, err)
	}
}

func TestParseBudget(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]float64{"20": 20, "12.50/day": 12.5, " 0 ": 0, "none": -1, "": -1} {
		if got, err := settings.ParseBudget(in); err != nil || got != want {
			t.Errorf("%q: %v %v, want %v", in, got, err, want)
		}
	}
	for _, bad := range []string{"lots", "-5", "5/week", "NaN", "1e12"} {
		if _, err := settings.ParseBudget(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// Values are checked before they are recorded: unknown names, a Check's refusal, limits.
func TestSetRefusesBadValues(t *testing.T) {
	t.Parallel()
	st := &memStore{}
	s := newSettings(st)
	ctx := context.Background()
	for _, c := range [][2]string{{"colour", "blue"}, {settings.Model, "nonsense"}, {settings.DailyBudget, "lots"},
		{settings.Setup, "npm ci\nrm -rf /"}, {settings.Instructions, strings.Repeat("x", settings.MaxInstructions+1)}, {settings.Instructions, "a\x00b"},
		{settings.CanvasOver, "lots"}, {settings.CanvasOver, "-1"}, {settings.CanvasOver, "2000000"},
		{settings.Surface, "canvas"}, {settings.Surface, "code_channel\x00"}} {
		var inv *settings.InvalidError
		if _, err := s.Set(ctx, "T1", "C1", c[0], c[1], true, "U0ADMIN"); !errors.As(err, &inv) {
			t.Errorf("%s=%q: %v", c[0], c[1], err)
		}
	}
	if len(st.rows) != 0 {
		t.Fatalf("recorded: %+v", st.rows)
	}
	unsup := settings.New(settings.Config{Store: st, Check: map[string]func(string) error{settings.Model: settings.Unsupported("one model")}})
	if _, err := unsup.Set(ctx, "T1", "C1", settings.Model, "openai:x", true, "U1"); !errors.Is(err, settings.ErrUnsupported) {
		t.Fatalf("unsupported: %v", err)
	}
}

// /logbook config: anyone of the workspace sees, only admins change, people of another
// organisation get nothing; other subcommands go to next, and help gets a line.
func TestConfigCommand(t *testing.T) {
	t.Parallel()
	st := &memStore{}
	next := slashcmd.Command{Name: "search", Run: func(_ context.Context, c slashcmd.Call) string { return "next:" + c.Text }}
	h := slashcmd.New("T1", slashcmd.Help{Outro: "outro"}).Add(next, settings.Command(newSettings(st))).Answer
	ctx := context.Background()
	run := func(user, team, text string) string {
		return h(ctx, slack.SlashCommand{Text: text, UserID: user, TeamID: team, ChannelID: "C0000001"})
	}
	if got := run("U1", "T1", "search x"); got != "next:search x" {
		t.Fatalf("passed on: %q", got)
	}
	if got := run("U1", "T1", "help"); !strings.Contains(got, "outro") || !strings.Contains(got, "• `/logbook config` shows") {
		t.Fatalf("help: %q", got)
	}
	if got := run("U1", "T1", "config"); !strings.Contains(got, "`model`: `anthropic:default` — default (LOGBOOK_MODEL)") {
		t.Fatalf("show: %q", got)
	}
	if got := run("U1", "T1", "config model openai:x"); !strings.Contains(got, "Only logbook's admins") || len(st.rows) != 0 {
		t.Fatalf("a non-admin: %q", got)
	}
	if got := run("U0ADMIN", "T2", "config model openai:x"); !strings.Contains(got, "Only people of this workspace") {
		t.Fatalf("another organisation: %q", got)
	}
	if got := run("U0ADMIN", "T1", "config model openai:x"); !strings.Contains(got, "is now `openai:x`; it was the default") {
		t.Fatalf("set: %q", got)
	}
	if got := run("U0ADMIN", "T1", "config model nonsense"); !strings.Contains(got, "was not changed: want provider:model") {
		t.Fatalf("refused: %q", got)
	}
	if got := run("U1", "T1", "config model"); !strings.Contains(got, "set by <@U0ADMIN>") || !strings.Contains(got, "default → `openai:x`") {
		t.Fatalf("one, with history: %q", got)
	}
	if got := run("U0ADMIN", "T1", "config instructions Use <b>bold</b> `code`"); !strings.Contains(got, "`Use &lt;b&gt;bold&lt;/b&gt; 'code'`") {
		t.Fatalf("escaped: %q", got)
	}
	if got := run("U0ADMIN", "T1", "config model default"); !strings.Contains(got, "default again") || !strings.Contains(got, "it was `openai:x`") {
		t.Fatalf("reset: %q", got)
	}
	// An operator's name from `logbook config apply` (any text the operator's USER holds) is
	// shown as inert code, not as a mention it could forge.
	if _, err := st.SetChannelSetting(ctx, session.ChannelSetting{Team: "T1", Channel: "C0000001", Name: "thread_replies", New: "all", Set: true,
		SetBy: "deploy-bot> <!here", Via: session.ViaFile}); err != nil {
		t.Fatal(err)
	}
	if got := run("U1", "T1", "config thread_replies"); strings.Contains(got, "<!here") || strings.Contains(got, "<@deploy") ||
		!strings.Contains(got, "set by `deploy-bot&gt; &lt;!here` (operator)") {
		t.Fatalf("an operator's name: %q", got)
	}
}

// countingStore counts the reads of a channel's settings.
type countingStore struct {
	*memStore
	mu    sync.Mutex
	reads int
}

func (c *countingStore) ChannelSettingsAt(ctx context.Context, team, channel string) (map[string]session.ChannelSetting, session.Head, error) {
	c.mu.Lock()
	c.reads++
	c.mu.Unlock()
	return c.memStore.ChannelSettingsAt(ctx, team, channel)
}

// A turn reads its channel's settings once: under its context (Within) the budget's meter and
// the setup step get the turn's read without a round trip, the same values the turn runs
// under; another channel, another Settings or the next turn read the store, so a change
// takes effect on the next turn.
func TestWithinAnswersTheTurnsRead(t *testing.T) {
	store := &countingStore{memStore: &memStore{}}
	s := settings.New(settings.Config{Store: store, Defaults: map[string]string{settings.DailyBudget: "5"}})
	ctx := context.Background()
	if _, err := s.Set(ctx, "T1", "C1", settings.DailyBudget, "20", true, "U1"); err != nil {
		t.Fatal(err)
	}
	turn, err := s.For(ctx, "T1", "C1")
	if err != nil {
		t.Fatal(err)
	}
	tctx := s.Within(ctx, turn)
	if _, err := s.Set(ctx, "T1", "C1", settings.DailyBudget, "30", true, "U1"); err != nil {
		t.Fatal(err)
	}
	sub, cancel := context.WithCancel(tctx) // a model call's context, derived from the turn's
	defer cancel()
	for range 3 {
		c, err := s.For(sub, "T1", "C1")
		if err != nil {
			t.Fatal(err)
		}
		if v, _ := c.DailyBudget(); v != 20 {
			t.Fatalf("within the turn the budget is %v, want the turn's 20", v)
		}
	}
	if store.reads != 1 {
		t.Fatalf("%d reads of the settings within one turn, want 1", store.reads)
	}
	if _, err := s.For(tctx, "T1", "C2"); err != nil {
		t.Fatal(err)
	}
	other := settings.New(settings.Config{Store: store})
	if _, err := other.For(tctx, "T1", "C1"); err != nil {
		t.Fatal(err)
	}
	if store.reads != 3 {
		t.Fatalf("%d reads, want 3: another channel and another Settings read the store", store.reads)
	}
	next, err := s.For(ctx, "T1", "C1")
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := next.DailyBudget(); v != 30 {
		t.Fatalf("the next turn's budget is %v, want the change's 30", v)
	}
}
