package bot_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/slack-go/slack"

	"github.com/logbook/logbook/bot/recall"
	"github.com/logbook/logbook/migrations/pgtest"
	"github.com/logbook/logbook/session"
	"github.com/logbook/logbook/session/search"
)

// channels is a hand-written recall.Visibility: what conversations.info says now.
type channels struct {
	private, shared map[string]bool
}

func (c channels) ChannelPrivate(_ context.Context, id string) (bool, error) {
	if id == "C00000ERR" {
		return false, errors.New("conversations.info: ratelimited")
	}
	return c.private[id], nil
}

func (c channels) ChannelExtShared(_ context.Context, id string) (bool, error) {
	if id == "C00000ERR" {
		return false, errors.New("conversations.info: ratelimited")
	}
	return c.shared[id], nil
}

const (
	pubChan    = "C00000PUB" // an internal public channel
	privChan   = "C0000PRIV" // public when logged, private now
	sharedChan = "C000SHARE" // shared with another organisation (Slack Connect)
	homeTeam   = "T0000001"
)

// searchFixture logs one thread in each kind of channel, each with the word "quasar" and a
// word of its own, and indexes them.
func searchFixture(t *testing.T) *search.Searcher {
	t.Helper()
	ctx := context.Background()
	dbURL := pgtest.New(t)
	pool, err := session.Connect(ctx, dbURL, session.PoolOptions{Role: "logbook_app"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	st := session.NewStore(pool, session.Options{})
	for ch, word := range map[string]string{pubChan: "alpha", privChan: "bravo", sharedChan: "charlie", "C00000ERR": "delta"} {
		s, err := st.Open(ctx, session.ThreadKey{Team: homeTeam, Channel: ch, ThreadTS: "1700000000.000100"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.Append(ctx, s.ID, session.NewEvent{Type: session.TypeUserMessage,
			Actor: session.Actor{Kind: session.ActorUser, ID: ada}, Payload: session.UserMessage{Team: homeTeam, Channel: ch,
				ThreadTS: "1700000000.000100", TS: "1700000000.000100", User: ada, UserName: "ada",
				Text: "the quasar rollout, codename " + word}}); err != nil {
			t.Fatal(err)
		}
	}
	sctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := search.NewIndexer(st, pool, zerolog.Nop(), search.IndexerOptions{}).Sync(sctx); err != nil {
		t.Fatal(err)
	}
	return search.NewSearcher(pool, search.Options{})
}

func shows(t *testing.T, surface, got string, want, not []string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(got, w) {
			t.Errorf("%s does not show %q:\n%s", surface, w, got)
		}
	}
	for _, n := range not {
		if strings.Contains(got, n) {
			t.Errorf("%s shows %q:\n%s", surface, n, got)
		}
	}
}

// /logbook search and the agent's search tool check every hit's channel now, as the web pages
// do (issue 17: a channel made private after the fact was hidden on the web but not here),
// and a search from a channel shared with another organisation stays inside that channel.
func TestSearchSurfacesCheckVisibilityAndSlackConnectScope(t *testing.T) {
	t.Parallel()
	s := searchFixture(t)
	ctx := context.Background()
	vis := channels{private: map[string]bool{privChan: true}, shared: map[string]bool{sharedChan: true}}

	// The positive control: without the check every channel's thread is found.
	all := slashTable(s, nil, homeTeam, nil, nil).Answer(ctx, slack.SlashCommand{Text: "search quasar", TeamID: homeTeam, ChannelID: pubChan, UserID: ada})
	shows(t, "unchecked search", all, []string{"alpha", "bravo", "charlie", "delta"}, nil)

	slash := slashTable(s, vis, homeTeam, nil, nil).Answer
	ask := func(team, channel string) string {
		return slash(ctx, slack.SlashCommand{Text: "search quasar", TeamID: team, ChannelID: channel, UserID: grace})
	}
	// In an internal channel: every public channel, never the one made private, nor one whose
	// visibility is unknown.
	shows(t, "/logbook search in an internal channel", ask(homeTeam, pubChan), []string{"alpha", "charlie"}, []string{"bravo", "delta"})
	// In a shared channel: that channel only, for its own people and the other organisation's.
	shows(t, "/logbook search in a shared channel", ask(homeTeam, sharedChan),
		[]string{"charlie", "Only this channel"}, []string{"alpha", "bravo", "delta"})
	shows(t, "/logbook search by the other organisation in a shared channel", ask("T000OTHER", sharedChan),
		[]string{"charlie"}, []string{"alpha", "bravo", "delta"})
	// A person of another team gets the channel they ask in, wherever that is.
	shows(t, "/logbook search by another team", ask("T000OTHER", pubChan), []string{"alpha"}, []string{"bravo", "charlie", "delta"})
	// A channel whose sharing cannot be learnt is searched as shared: only itself (and it is
	// hidden, its visibility being unknown too).
	shows(t, "/logbook search in a channel of unknown kind", ask(homeTeam, "C00000ERR"), []string{"No past threads"},
		[]string{"alpha", "bravo", "charlie", "delta"})

	tool := recall.New(s, vis)
	agent := func(channel string) string {
		out, err := tool.For(channel).Search(ctx, "quasar", 5)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	shows(t, "the agent's search in an internal channel", agent(pubChan), []string{"alpha", "charlie"}, []string{"bravo", "delta"})
	shows(t, "the agent's search in a shared channel", agent(sharedChan), []string{"charlie"}, []string{"alpha", "bravo", "delta"})
	if out, _ := recall.New(s, nil).For(sharedChan).Search(ctx, "quasar", 5); !strings.Contains(out, "bravo") {
		t.Errorf("the agent's unchecked search (positive control) misses the private channel's thread:\n%s", out)
	}
}

// /logbook answers what was typed: search without words says what to type (not that search
// is unavailable), an unknown subcommand is named as not existing, help and nothing are help.
func TestSlashAnswersSayWhatToType(t *testing.T) {
	t.Parallel()
	slash := slashTable(searchFixture(t), nil, homeTeam, nil, nil).Answer
	ask := func(text string) string {
		return slash(context.Background(), slack.SlashCommand{Text: text, TeamID: homeTeam, ChannelID: pubChan, UserID: ada})
	}
	for _, text := range []string{"search", "search   "} {
		shows(t, "/logbook "+text, ask(text), []string{"Say what to look for: `/logbook search <words>`"}, []string{"unavailable"})
	}
	shows(t, "/logbook frobnicate", ask("frobnicate now"), []string{"There is no `/logbook frobnicate`", "`/logbook search <words>` finds"}, nil)
	shows(t, "/logbook <`x`>", ask("<`x`>"), []string{"There is no `/logbook &lt;'x'&gt;`"}, nil)
	for _, text := range []string{"", "help"} {
		shows(t, "/logbook "+text, ask(text), []string{"`/logbook search <words>` finds", "`/logbook repo` says"}, []string{"There is no"})
	}
	shows(t, "/logbook search quasar", ask("search quasar"), []string{"alpha"}, []string{"Say what to look for"})
}
