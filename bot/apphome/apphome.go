// Package apphome is logbook's App Home tab (a bot.Surface): when a person opens it
// (app_home_opened), it publishes their own view with views.publish — the sessions they posted
// in lately, which of those is running and which waits for an approval, the schedules of the
// channels of those sessions, and what their model calls cost today.
//
// Everything in the view is read by the person's own user id, from the log: nobody sees
// another person's sessions or spend there. A session in a channel that became private is
// left out, as everywhere else. The view only reads: it changes nothing of the agent, so it
// appends no event.
package apphome

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/rs/zerolog"
	"github.com/slack-go/slack"
	"github.com/slack-go/slack/slackevents"

	"github.com/logbook/logbook/bot/budget"
	"github.com/logbook/logbook/bot/mrkdwn"
	"github.com/logbook/logbook/session"
	"github.com/logbook/logbook/session/clip"
	"github.com/logbook/logbook/session/thread"
)

// Store is what the view reads (session.Store has it).
type Store interface {
	PersonSessions(ctx context.Context, person string, since time.Time, limit int) ([]session.PersonSession, error)
	Events(ctx context.Context, id session.ID, r session.Range) ([]session.Event, error)
	Schedules(ctx context.Context, team, channel string, withRemoved bool) ([]session.Schedule, error)
	Spent(ctx context.Context, channel, person string, day time.Time) (session.SpendTotals, error)
}

// Publisher publishes a Home tab view (slack.Client has it).
type Publisher interface {
	PublishViewContext(ctx context.Context, req slack.PublishViewContextRequest) (*slack.ViewResponse, error)
}

// Privacy says whether a channel is private now (directory.Directory has it).
type Privacy interface {
	ChannelPrivate(ctx context.Context, id string) (bool, error)
}

// Defaults of Surface.
const (
	DefaultWindow = 14 * 24 * time.Hour
	DefaultLimit  = 10
)

// Surface answers app_home_opened with the person's own view.
type Surface struct {
	Store   Store
	Slack   Publisher
	Privacy Privacy // nil: every channel a session is in counts as public
	// Currency names the prices' currency in the spend line (default USD).
	Currency string
	// Link is a session's transcript link ("" or nil: none).
	Link   func(session.ID) string
	Window time.Duration    // how far back sessions are shown; default DefaultWindow
	Limit  int              // the most sessions shown; default DefaultLimit
	Now    func() time.Time // default time.Now
	Log    zerolog.Logger
}

// Interaction claims no interaction: the Home tab has no buttons.
func (s *Surface) Interaction(context.Context, slack.InteractionCallback) bool { return false }

// Event claims app_home_opened; on the Home tab it publishes the person's view. A view that
// cannot be read is published as a short note saying so (never another person's view, never
// nothing: the tab would keep showing an old one as if it were current).
func (s *Surface) Event(ctx context.Context, ev slackevents.EventsAPIEvent) bool {
	open, ok := ev.InnerEvent.Data.(*slackevents.AppHomeOpenedEvent)
	if !ok {
		return false
	}
	if open.Tab != "home" || open.User == "" {
		return true // the Messages tab, or no one to show: nothing to publish
	}
	log := s.Log.With().Str("user", open.User).Logger()
	blocks, err := s.View(ctx, open.User)
	if err != nil {
		log.Warn().Err(err).Msg("app home: read the person's view")
		blocks = []slack.Block{section("I could not read your sessions right now; open this tab again in a moment.")}
	}
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if _, err := s.Slack.PublishViewContext(pctx, slack.PublishViewContextRequest{UserID: open.User,
		View: slack.HomeTabViewRequest{Type: slack.VTHomeTab, Blocks: slack.Blocks{BlockSet: blocks}}}); err != nil {
		log.Warn().Err(err).Msg("app home: publish the view")
	}
	return true
}

// row is one of the person's sessions as the view shows it.
type row struct {
	sess    session.PersonSession
	title   string
	running bool
	waiting []session.ApprovalRequested // approval requests of an open turn, none decided
}

// View is person's Home tab: every block, read by their user id alone.
func (s *Surface) View(ctx context.Context, person string) ([]slack.Block, error) {
	now := time.Now()
	if s.Now != nil {
		now = s.Now()
	}
	sessions, err := s.Store.PersonSessions(ctx, person, now.Add(-cmp.Or(s.Window, DefaultWindow)), cmp.Or(s.Limit, DefaultLimit))
	if err != nil {
		return nil, err
	}
	var rows []row
	var channels []session.ThreadKey // team and channel of each, once
	for _, ps := range sessions {
		if s.Privacy != nil {
			private, err := s.Privacy.ChannelPrivate(ctx, ps.Key.Channel)
			if err != nil {
				return nil, fmt.Errorf("check channel %s: %w", ps.Key.Channel, err)
			}
			if private {
				continue
			}
		}
		r, err := s.read(ctx, ps, now)
		if err != nil {
			return nil, err
		}
		rows = append(rows, r)
		if !slices.ContainsFunc(channels, func(k session.ThreadKey) bool { return k.Channel == ps.Key.Channel }) {
			channels = append(channels, session.ThreadKey{Team: ps.Key.Team, Channel: ps.Key.Channel})
		}
	}
	spent, err := s.Store.Spent(ctx, "", person, now)
	if err != nil {
		return nil, err
	}
	blocks := []slack.Block{
		slack.NewHeaderBlock(slack.NewTextBlockObject(slack.PlainTextType, "Your logbook", false, false)),
		section(fmt.Sprintf("*Your model spend today* (UTC): %s %s", budget.Money(spent.Person), cmp.Or(s.Currency, "USD"))),
		slack.NewDividerBlock(),
		header("Running and waiting for you"),
	}
	var live []string
	for _, r := range rows {
		for _, a := range r.waiting {
			live = append(live, fmt.Sprintf("• :raised_hand: waiting for your approval: `%s` — %s in %s", mrkdwn.EscapeText(a.Tool),
				text(a.Summary, 200), s.where(r)))
		}
		if r.running && len(r.waiting) == 0 {
			live = append(live, "• :hourglass_flowing_sand: running: "+s.where(r))
		}
	}
	blocks = append(blocks, list(live, "Nothing is running or waiting for you."))
	blocks = append(blocks, header("Your recent sessions"))
	var recent []string
	for _, r := range rows {
		recent = append(recent, fmt.Sprintf("• %s — your last message <!date^%d^{date_short_pretty} {time}|%s>", s.where(r),
			r.sess.LastPost.Unix(), r.sess.LastPost.UTC().Format(time.RFC3339)))
	}
	blocks = append(blocks, list(recent, fmt.Sprintf("You have not talked to logbook in the last %d days.", int(cmp.Or(s.Window, DefaultWindow).Hours()/24))))
	blocks = append(blocks, header("Schedules of your channels"))
	var scheds []string
	for _, k := range channels {
		sc, err := s.Store.Schedules(ctx, k.Team, k.Channel, false)
		if err != nil {
			return nil, err
		}
		for _, x := range sc {
			scheds = append(scheds, fmt.Sprintf("• <#%s> `%s` — %s", k.Channel, mrkdwn.EscapeText(x.Spec), text(x.Prompt, 200)))
		}
	}
	blocks = append(blocks, list(scheds, "The channels of your sessions have no schedules."))
	return blocks, nil
}

// read folds what the view shows of one session: its title, whether a turn is open, and the
// approval requests of the open turn nobody decided.
func (s *Surface) read(ctx context.Context, ps session.PersonSession, now time.Time) (row, error) {
	evs, err := s.Store.Events(ctx, ps.ID, session.Range{Types: []session.Type{session.TypeUserMessage, session.TypeTitle,
		session.TypeTurnStarted, session.TypeTurnCompleted, session.TypeApprovalRequested, session.TypeApprovalDecided}})
	if err != nil {
		return row{}, err
	}
	r := row{sess: ps}
	for _, e := range evs {
		var t session.Title
		if e.Type == session.TypeTitle && e.Decode(&t) == nil && t.Text != "" {
			r.title = t.Text
		}
	}
	ts := thread.FoldTurns(evs)
	if last := ts.Last(); last != nil && last.Open {
		r.running = true
		for _, a := range last.Approvals {
			if _, _, decided := ts.Decision(a.Request.CallID); !decided && (a.Request.ExpiresAt.IsZero() || a.Request.ExpiresAt.After(now)) {
				r.waiting = append(r.waiting, a.Request)
			}
		}
	}
	return r, nil
}

// where names a session: its title (or "a thread") in its channel, linked to its transcript
// when logbook has a public address.
func (s *Surface) where(r row) string {
	name := "a thread"
	if r.title != "" {
		name = "_" + text(r.title, 80) + "_"
	}
	if s.Link != nil {
		if u := s.Link(r.sess.ID); u != "" {
			name = "<" + u + "|" + strings.Trim(name, "_") + ">"
		}
	}
	return name + " in <#" + r.sess.Key.Channel + ">"
}

// text is untrusted text (a title the model wrote, a schedule's prompt, a tool call's
// summary) as inert mrkdwn of at most n characters: it pings nobody and links nothing.
func text(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	return mrkdwn.EscapeText(mrkdwn.Inert(clip.Text(s, n)))
}

func header(t string) slack.Block {
	return slack.NewHeaderBlock(slack.NewTextBlockObject(slack.PlainTextType, t, false, false))
}

func section(t string) slack.Block {
	return slack.NewSectionBlock(slack.NewTextBlockObject(slack.MarkdownType, t, false, false), nil, nil)
}

// list is lines in one section (a section holds 3,000 characters: the lines that do not fit
// are counted instead), or empty when there are none.
func list(lines []string, empty string) slack.Block {
	if len(lines) == 0 {
		return section("_" + empty + "_")
	}
	var b strings.Builder
	for i, l := range lines {
		if b.Len()+len(l) > 2800 {
			fmt.Fprintf(&b, "… and %d more.", len(lines)-i)
			break
		}
		b.WriteString(l + "\n")
	}
	return section(strings.TrimSuffix(b.String(), "\n"))
}
