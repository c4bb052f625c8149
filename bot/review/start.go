package review

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/logbook/logbook/bot"
	"github.com/logbook/logbook/bot/forge"
	"github.com/logbook/logbook/bot/mrkdwn"
	"github.com/logbook/logbook/bot/settings"
	"github.com/logbook/logbook/bot/slashcmd"
	"github.com/logbook/logbook/session"
)

// MetadataEventType is the metadata event_type of the post that opens a review's thread.
const MetadataEventType = "logbook_review"

// Starter posts a message and runs a session on it (*bot.Starter).
type Starter interface {
	Start(ctx context.Context, o bot.Opening) (bot.Started, error)
}

// Store is what starting reviews needs of the log (*session.Store).
type Store interface {
	ChannelsWithSetting(ctx context.Context, name string, values []string) ([]session.ChannelSetting, error)
	Append(ctx context.Context, id session.ID, evs ...session.NewEvent) ([]session.Event, error)
}

// Trigger starts reviews in a channel's thread for its pull request: from /logbook review, and
// from GitHub's webhooks in channels that opted in (review_on). One pull request has one
// thread per channel (the opening's key is the channel and the pull request): a later push
// asks for the review again in that thread, which then covers what changed.
type Trigger struct {
	Store   Store
	Starter Starter
	// Signal wakes a session (the runner's).
	Signal func(session.ID)
	// Repo is a channel's repository on GitHub.
	Repo func(ctx context.Context, team, channel string) (forge.Repo, bool, error)
	// Login is logbook's account on GitHub: a request for its review starts one where the
	// channel's review_on is request (or auto). nil or "": such a request starts none.
	Login func(ctx context.Context) string
	// Team is the workspace's team id.
	Team string
}

// Start starts (or asks again, in the pull request's thread of the channel) the review ask
// names in channel. key names this ask among the thread's (a slash command's trigger, a
// pushed head): asked twice with one key, the thread is asked once. by is who asked.
func (t *Trigger) Start(ctx context.Context, team, channel string, ask Ask, by session.Actor, who, key string) (bot.Started, error) {
	input := "review " + ask.URL
	o := bot.Opening{Team: team, Channel: channel, Actor: by, Input: input, Kind: MetadataEventType,
		Key:  channel + "/" + ask.Repo + "#" + strconv.Itoa(ask.Number),
		Text: fmt.Sprintf(":mag: Review of <%s|%s#%d>, asked by %s. Each push asks again here.", ask.URL, mrkdwn.EscapeText(ask.Repo), ask.Number, who)}
	st, err := t.Starter.Start(ctx, o)
	if err != nil || !st.Found {
		return st, err
	}
	// The thread was there already: the ask is a new message of it.
	user := ""
	if by.Kind == session.ActorUser {
		user = by.ID
	}
	_, err = t.Store.Append(ctx, st.Session.ID, session.NewEvent{Type: session.TypeUserMessage, Actor: by, IdempotencyKey: "review/" + key,
		Payload: session.UserMessage{Team: st.Session.Key.Team, Channel: channel, ThreadTS: st.TS, TS: st.TS, User: user, Text: input, Mentioned: true}})
	if err != nil {
		return st, err
	}
	t.Signal(st.Session.ID)
	return st, nil
}

// Command is /logbook review <pull request url>, in a channel whose repository holds it.
func (t *Trigger) Command() slashcmd.Command {
	return slashcmd.Command{Name: "review", Who: slashcmd.Home,
		Usage:   "`/logbook review <pull request url>` reviews a pull request of this channel's repository in a thread (`@logbook review <url>` in a thread reviews it there).",
		Refusal: "Only people of this workspace's organisation may ask for a review.",
		Run: func(ctx context.Context, c slashcmd.Call) string {
			ask, ok := ParseAsk("review " + c.Args)
			if !ok {
				return "Say which pull request: `/logbook review https://github.com/<owner>/<name>/pull/<number>`."
			}
			repo, ok, err := t.Repo(ctx, c.Team, c.ChannelID)
			switch {
			case err != nil:
				return "The channel's repository cannot be read right now; try again later."
			case !ok:
				return "This channel has no repository on GitHub (`/logbook repo`), so it reviews no pull request."
			case !strings.EqualFold(repo.String(), ask.Repo):
				return fmt.Sprintf("This channel reviews pull requests of `%s` only; `%s` is not one.", repo, inert(ask.Repo))
			}
			st, err := t.Start(ctx, c.Team, c.ChannelID, ask, session.Actor{Kind: session.ActorUser, ID: c.UserID}, "<@"+c.UserID+">", "slash/"+c.TriggerID)
			switch {
			case errors.Is(err, bot.ErrPrivateChannel):
				return "logbook keeps no record of private channels, so it reviews nothing here."
			case err != nil:
				return "The review could not be started: " + inert(err.Error())
			}
			where := "a new thread"
			if st.Found {
				where = "its thread"
			}
			return fmt.Sprintf("Reviewing %s#%d in %s of this channel.", ask.Repo, ask.Number, where)
		}}
}

// Webhook starts the reviews a GitHub delivery asks for (followup.Config.Reviews): a pull
// request opened, reopened, pushed to or marked ready (event pull_request) in the channels
// whose review_on is auto, and one where logbook's account is asked to review (action
// review_requested) in those whose review_on is request or auto. It returns how many it
// started (or asked again); a draft is not reviewed until it is ready.
func (t *Trigger) Webhook(ctx context.Context, event string, body []byte) (int, error) {
	if event != "pull_request" {
		return 0, nil
	}
	var p struct {
		Action      string `json:"action"`
		PullRequest struct {
			Number  int    `json:"number"`
			HTMLURL string `json:"html_url"`
			Draft   bool   `json:"draft"`
			State   string `json:"state"`
			Head    struct {
				SHA string `json:"sha"`
			} `json:"head"`
		} `json:"pull_request"`
		RequestedReviewer struct {
			Login string `json:"login"`
		} `json:"requested_reviewer"`
		Repository struct {
			FullName string `json:"full_name"`
		} `json:"repository"`
		Sender struct {
			Login string `json:"login"`
		} `json:"sender"`
	}
	if err := json.Unmarshal(body, &p); err != nil {
		return 0, fmt.Errorf("read the pull_request delivery: %w", err)
	}
	var modes []string
	switch p.Action {
	case "opened", "reopened", "synchronize", "ready_for_review":
		modes = []string{settings.ReviewAuto}
	case "review_requested":
		if t.Login != nil && p.RequestedReviewer.Login != "" && strings.EqualFold(p.RequestedReviewer.Login, t.Login(ctx)) {
			modes = []string{settings.ReviewAuto, settings.ReviewRequest}
		}
	}
	pr := p.PullRequest
	if modes == nil || pr.Draft || pr.State == "closed" || pr.Head.SHA == "" {
		return 0, nil
	}
	ask, ok := ParseAsk("review " + pr.HTMLURL)
	if !ok || !strings.EqualFold(ask.Repo, p.Repository.FullName) || ask.Number != pr.Number {
		return 0, nil
	}
	channels, err := t.Store.ChannelsWithSetting(ctx, settings.ReviewOn, modes)
	if err != nil {
		return 0, err
	}
	started := 0
	var failed []error
	for _, c := range channels {
		repo, ok, err := t.Repo(ctx, c.Team, c.Channel)
		if err != nil {
			failed = append(failed, err)
			continue
		}
		if !ok || !strings.EqualFold(repo.String(), ask.Repo) || (t.Team != "" && c.Team != t.Team) {
			continue
		}
		who := "`" + mrkdwn.EscapeText(strings.ReplaceAll(p.Sender.Login, "`", "'")) + "` on GitHub (" + p.Action + ")"
		_, err = t.Start(ctx, c.Team, c.Channel, ask, session.Actor{Kind: session.ActorGitHub, ID: p.Sender.Login}, who,
			ask.Repo+"#"+strconv.Itoa(ask.Number)+"@"+pr.Head.SHA)
		if err != nil && !bot.Permanent(err) {
			failed = append(failed, err)
			continue
		}
		if err == nil {
			started++
		}
	}
	return started, errors.Join(slices.Clip(failed)...)
}
