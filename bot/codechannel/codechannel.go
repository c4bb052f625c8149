// Package codechannel gives a session that works on the repository a Slack Code code channel
// of its own, in channels whose surface setting is code_channel (/logbook config surface
// code_channel; the default, thread, makes none).
//
// A session works on the repository once its sandbox was provisioned — the sandbox_provisioned
// event, written when the first repository tool call (read_file, run_command, …) checks the
// repository out. The turn that did it makes the channel once the agent answered; its reply
// links it. The channel is made once per session:
//
//   - code_channel_requested is appended before agents.conversations.create is called, with
//     the session's id as Slack's session_id (Slack answers a second call for the same
//     session_id with the channel it made);
//   - code_channel_created (channel id, origin thread, commands) is appended after it.
//
// A cell that dies between the two leaves a request without its channel: the next turn that
// answers (Settle) calls again with the same session_id and records the channel Slack already
// made. The event is also the mapping from the channel to the session (session.Store's
// SessionByThread): what people write there is the same session and the same log, and the
// turn answers it there.
//
// The channel's context bar (repository, branch, pull request, CI status from follow-through,
// the session's spend) is set as those change, read from the log on each turn that answers —
// a CI signal is such a turn — and only when it differs from what this cell last set. Its
// status is processing while a turn runs the agent, suspended while the turn waits for a
// person's approval, and active once it answered. /logbook's
// subcommands are registered as the channel's commands when it is made.
package codechannel

import (
	"cmp"
	"context"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/slack-go/slack"

	"github.com/logbook/logbook/bot/part"
	"github.com/logbook/logbook/bot/settings"
	"github.com/logbook/logbook/session"
)

// Slack is what the part calls (*slack.Client).
type Slack interface {
	CreateAgentConversationContext(ctx context.Context, name string, options ...slack.CreateAgentConversationOption) (*slack.AgentConversationCreateResponse, error)
	SetAgentConversationPropertiesContext(ctx context.Context, channelID string, options ...slack.SetAgentConversationPropertiesOption) (*slack.AgentConversationSetPropertiesResponse, error)
	SetAgentConversationCommandsContext(ctx context.Context, channelID string, commands []slack.AgentCommand) (*slack.AgentConversationSetCommandsResponse, error)
	SetAgentSessionStatusContext(ctx context.Context, params slack.AgentSessionSetStatusParameters) (*slack.AgentSessionSetStatusResponse, error)
}

// Part is the code channel part of a turn (a part.Part, Settler and Footer).
type Part struct {
	Slack Slack
	// Commands are /logbook's subcommands, registered as the code channel's commands.
	Commands []slack.AgentCommand
	// Spend is the session's spend as the context bar shows it ("USD 0.42 spent"), read from
	// its log (nil, or "": its model tokens).
	Spend func(evs []session.Event) string
}

var actor = session.Actor{Kind: session.ActorSystem, ID: "codechannel"}

// Idempotency keys: one request and one channel per session.
const (
	keyRequested = "code_channel/requested"
	keyCreated   = "code_channel/created"
)

// Slack's agent session statuses this part sets on the code channel.
const (
	statusWorking = slack.AgentSessionStatusProcessing
	statusIdle    = slack.AgentSessionStatusActive
	statusWaiting = slack.AgentSessionStatusSuspended // for a person: an approval request
)

// cellKey keys the part's state in the cell (part.Cell).
type cellKey struct{}

// state is what the cell last set on the code channel: calls that would set the same are
// not made.
type state struct {
	mu     sync.Mutex
	bar    []slack.AgentContextBarItem
	barSet bool
	status string
}

func stateOf(s part.Scope) *state {
	v, ok := s.Cell.Value(cellKey{}, func() (any, func()) { return &state{}, nil })
	if !ok {
		return &state{} // a cell that ended: nothing to coalesce with
	}
	return v.(*state)
}

// on reports whether the session's channel asks for code channels.
func on(s part.Scope) bool {
	return s.Channel != nil && s.Channel.Value(settings.Surface) == settings.SurfaceCodeChannel
}

// Offer marks the code channel working while the turn runs the agent, and once the agent
// answered makes the channel (when the session has just started working on the repository)
// and brings its context bar up to date, then marks it idle.
func (p *Part) Offer(ctx context.Context, s part.Scope) (part.Offer, error) {
	if c, ok := Created(s.Log.Snapshot()); ok {
		p.status(ctx, s, c.ChannelID, statusWorking)
	} else if !on(s) {
		return part.Offer{}, nil
	}
	return part.Offer{Answered: func(ctx context.Context) ([]string, error) {
		c, ok, err := p.ensure(ctx, s)
		if err != nil || !ok {
			return nil, err
		}
		p.contextBar(ctx, s, c.ChannelID)
		p.status(ctx, s, c.ChannelID, statusIdle)
		return nil, nil
	}, Waiting: func(ctx context.Context, waiting bool) {
		c, ok := Created(s.Log.Snapshot())
		if !ok {
			return
		}
		status := statusWorking
		if waiting {
			status = statusWaiting
		}
		p.status(ctx, s, c.ChannelID, status)
	}}, nil
}

// Settle finishes a creation a dead cell left (a request without its channel) and brings the
// context bar up to date, on every turn that answers — a CI signal's too, which runs no model.
func (p *Part) Settle(ctx context.Context, s part.Scope) error {
	c, ok, err := p.ensure(ctx, s)
	if err != nil || !ok {
		return err
	}
	p.contextBar(ctx, s, c.ChannelID)
	return nil
}

// Footer links the code channel under the reply of the turn that made it.
func (p *Part) Footer(s part.Scope) []string {
	c, ok := Created(s.Log.Snapshot())
	if !ok || c.Turn != s.Turn {
		return nil
	}
	return []string{"This session has a code channel: <#" + c.ChannelID + ">"}
}

// Created is the session's code channel as its log records it.
func Created(evs []session.Event) (session.CodeChannelCreated, bool) {
	var c session.CodeChannelCreated
	for _, e := range session.Select(evs, session.Range{Types: []session.Type{session.TypeCodeChannelCreated}}) {
		if e.Decode(&c) == nil && c.ChannelID != "" {
			return c, true
		}
	}
	return c, false
}

// ensure returns the session's code channel, making it when the channel asks for one and the
// session works on the repository, or finishing a request a dead cell left. ok false: none
// (yet). A Slack call that fails is logged, and a later turn tries again; an error is the
// log's.
func (p *Part) ensure(ctx context.Context, s part.Scope) (session.CodeChannelCreated, bool, error) {
	evs := s.Log.Snapshot()
	if c, ok := Created(evs); ok {
		return c, true, nil
	}
	var req session.CodeChannelRequested
	requested := false
	for _, e := range session.Select(evs, session.Range{Types: []session.Type{session.TypeCodeChannelRequested}}) {
		requested = e.Decode(&req) == nil
	}
	if !requested {
		if !on(s) || !workedOnRepo(evs) {
			return session.CodeChannelCreated{}, false, nil
		}
		req = session.CodeChannelRequested{Turn: s.Turn, Name: Name(s.Session)}
		if _, err := s.Log.Append(ctx, session.NewEvent{Type: session.TypeCodeChannelRequested, Actor: actor,
			IdempotencyKey: keyRequested, Payload: req}); err != nil {
			return session.CodeChannelCreated{}, false, err
		}
	}
	key := s.Session.Key
	res, err := p.Slack.CreateAgentConversationContext(ctx, req.Name,
		slack.CreateAgentConversationOptionSessionID(s.Session.ID.String()),
		slack.CreateAgentConversationOptionOriginChannelID(key.Channel),
		slack.CreateAgentConversationOptionOriginMessageTimestamp(key.ThreadTS))
	if err != nil {
		s.Logger.Warn().Err(err).Msg("code channel: agents.conversations.create failed; a later turn asks again")
		return session.CodeChannelCreated{}, false, nil
	}
	c := session.CodeChannelCreated{ChannelID: res.ChannelID, Name: req.Name, OriginChannel: key.Channel, OriginTS: key.ThreadTS, Turn: s.Turn}
	if len(p.Commands) > 0 {
		if _, err := p.Slack.SetAgentConversationCommandsContext(ctx, res.ChannelID, p.Commands); err != nil {
			s.Logger.Warn().Err(err).Str("channel", res.ChannelID).Msg("code channel: could not register /logbook's commands")
		} else {
			for _, cmd := range p.Commands {
				c.Commands = append(c.Commands, cmd.Name)
			}
		}
	}
	if _, err := s.Log.Append(ctx, session.NewEvent{Type: session.TypeCodeChannelCreated, Actor: actor,
		IdempotencyKey: keyCreated, Payload: c}); err != nil {
		return session.CodeChannelCreated{}, false, err
	}
	return c, true, nil
}

// workedOnRepo reports whether the session's sandbox was ever provisioned with a repository.
func workedOnRepo(evs []session.Event) bool {
	for _, e := range session.Select(evs, session.Range{Types: []session.Type{session.TypeSandboxProvisioned}}) {
		var p session.SandboxProvisioned
		if e.Decode(&p) == nil && p.Repo != "" {
			return true
		}
	}
	return false
}

// Name is the code channel's name for a session: the same on every try.
func Name(sess session.Session) string {
	id := sess.ID.String()
	return "logbook " + id[len(id)-8:]
}

// status sets the code channel's agent session status, unless this cell set it already.
func (p *Part) status(ctx context.Context, s part.Scope, channel, status string) {
	st := stateOf(s)
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.status == status {
		return
	}
	if _, err := p.Slack.SetAgentSessionStatusContext(ctx, slack.AgentSessionSetStatusParameters{Status: status, ChannelID: channel}); err != nil {
		s.Logger.Warn().Err(err).Str("channel", channel).Msg("code channel: could not set its status")
		return
	}
	st.status = status
}

// contextBar sets the code channel's context bar from the log, unless it is what this cell
// last set.
func (p *Part) contextBar(ctx context.Context, s part.Scope, channel string) {
	bar := p.Bar(s.Log.Snapshot())
	st := stateOf(s)
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.barSet && slices.Equal(st.bar, bar) {
		return
	}
	if _, err := p.Slack.SetAgentConversationPropertiesContext(ctx, channel,
		slack.SetAgentConversationPropertiesOptionCodeChannel(slack.AgentCodeChannelProperties{ContextBarItems: bar})); err != nil {
		s.Logger.Warn().Err(err).Str("channel", channel).Msg("code channel: could not set its context bar; the next turn tries again")
		return
	}
	st.bar, st.barSet = bar, true
}

// Bar is the context bar of a session's log: its repository, branch, pull request, CI status
// and spend, each when known — at most five items, in that order.
func (p *Part) Bar(evs []session.Event) []slack.AgentContextBarItem {
	bar := []slack.AgentContextBarItem{}
	var repo string
	for _, e := range session.Select(evs, session.Range{Types: []session.Type{session.TypeSandboxProvisioned}}) {
		var sp session.SandboxProvisioned
		if e.Decode(&sp) == nil && sp.Repo != "" {
			repo = sp.Repo
		}
	}
	var pr session.PullRequest
	prSeq := int64(0)
	for _, e := range session.Select(evs, session.Range{Types: []session.Type{session.TypePullRequest}}) {
		if e.Decode(&pr) == nil {
			prSeq = e.Seq
		}
	}
	if repo != "" {
		bar = append(bar, item("repository", repoLabel(repo), webURL(repo)))
	}
	if prSeq > 0 && pr.Branch != "" {
		bar = append(bar, item("branch", pr.Branch, ""))
	}
	if prSeq > 0 && pr.Number > 0 {
		bar = append(bar, item("pull_request", "#"+strconv.Itoa(pr.Number), webURL(pr.URL)))
		if ci := ciStatus(evs, pr, prSeq); ci != "" {
			bar = append(bar, item("ci", ci, ""))
		}
	}
	if spend := p.spend(evs); spend != "" {
		bar = append(bar, item("spend", spend, ""))
	}
	return bar
}

// ciStatus is the pull request's CI as follow-through last saw it: pending until a signal
// came, then passing, failing or changes requested; "" when the session does not follow it.
func ciStatus(evs []session.Event, pr session.PullRequest, since int64) string {
	followed := false
	for _, e := range session.Select(evs, session.Range{From: since, Types: []session.Type{session.TypeFollowupSubscribed}}) {
		var f session.FollowupSubscribed
		if e.Decode(&f) == nil && f.Number == pr.Number {
			followed = true
		}
	}
	if !followed {
		return ""
	}
	ci := "CI pending"
	for _, e := range session.Select(evs, session.Range{From: since, Types: []session.Type{session.TypeFollowupSignal, session.TypeFollowupEnded}}) {
		if e.Type == session.TypeFollowupEnded {
			var f session.FollowupEnded
			if e.Decode(&f) == nil && f.Number == pr.Number {
				ci = cmp.Or(f.Reason, "ended")
			}
			continue
		}
		var sig session.FollowupSignal
		if e.Decode(&sig) != nil || sig.Number != pr.Number {
			continue
		}
		switch sig.Kind {
		case session.SignalSuccess:
			ci = "CI passing"
		case session.SignalCheckFailed:
			ci = fmt.Sprintf("CI failing (attempt %d)", sig.Attempt)
		case session.SignalReview:
			ci = "changes requested"
		case session.SignalExhausted:
			ci = "CI failing: needs a person"
		}
	}
	return ci
}

// spend is the session's spend: Part.Spend's, else its model tokens.
func (p *Part) spend(evs []session.Event) string {
	if p.Spend != nil {
		if s := p.Spend(evs); s != "" {
			return s
		}
	}
	var tokens int64
	for _, e := range session.Select(evs, session.Range{Types: []session.Type{session.TypeAssistantMessage}}) {
		var m session.AssistantMessage
		if e.Decode(&m) == nil && m.Usage != nil {
			tokens += m.Usage.InputTokens + m.Usage.OutputTokens
		}
	}
	if tokens == 0 {
		return ""
	}
	if tokens >= 1000 {
		return fmt.Sprintf("%.1fk tokens", float64(tokens)/1000)
	}
	return fmt.Sprintf("%d tokens", tokens)
}

// item is an informational context bar item. Labels come from the log (a branch the model
// named, a repository URL): they are made inert and short.
func item(key, label, link string) slack.AgentContextBarItem {
	return slack.AgentContextBarItem{Key: key, Label: inert(label), URL: link}
}

// inert drops what Slack could read as markup (<…>, &) and cuts the label to 80 runes.
func inert(s string) string {
	s = strings.Map(func(r rune) rune {
		switch r {
		case '<', '>', '&', '\n', '\r':
			return -1
		}
		return r
	}, s)
	if r := []rune(s); len(r) > 80 {
		s = string(r[:79]) + "…"
	}
	return s
}

// repoLabel is owner/name of a repository URL (its last part when it has one), else the URL.
func repoLabel(repo string) string {
	u, err := url.Parse(repo)
	if err != nil || u.Path == "" {
		return repo
	}
	parts := strings.Split(strings.Trim(strings.TrimSuffix(u.Path, ".git"), "/"), "/")
	switch {
	case len(parts) >= 2:
		return parts[len(parts)-2] + "/" + parts[len(parts)-1]
	case parts[0] != "":
		return parts[0]
	}
	return repo
}

// webURL is link when it is an https URL without credentials, else "".
func webURL(link string) string {
	u, err := url.Parse(link)
	if err != nil || u.Scheme != "https" || u.User != nil {
		return ""
	}
	return strings.TrimSuffix(link, ".git")
}
