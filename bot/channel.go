package bot

import (
	"context"
	"fmt"
	"sync"

	"github.com/logbook/logbook/bot/settings"
)

// Each channel its own agent (issue 31): the turn's side of a channel's settings
// (Features.Settings) and its own model (Features.Models). A turn reads them once, at its
// start (channelTurn), and uses them in its phases (thread manners, approvals, the agent);
// the parts (settings.Part, memory, checkout) give the system prompt the rest, and the turn
// records what it ran under in a turn_settings event before its first model call.

// Models gives a channel whose model setting differs from the default the agent of its model,
// built once per spec and kept.
type Models struct {
	// New builds the agent of a model spec (LOGBOOK_MODEL syntax); an error says the spec
	// cannot be used here (a provider without its key, say).
	New func(spec string) (Agent, error)

	mu     sync.Mutex
	agents map[string]Agent
}

// Agent returns the agent of spec, building it on first use.
func (m *Models) Agent(spec string) (Agent, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if a, ok := m.agents[spec]; ok {
		return a, nil
	}
	a, err := m.New(spec)
	if err != nil {
		return nil, err
	}
	if m.agents == nil {
		m.agents = map[string]Agent{}
	}
	m.agents[spec] = a
	return a, nil
}

// SettingsChecks are the validators of the settings whose syntax the bot owns, for
// settings.Config.Check: the model (models nil: it cannot be set), the approvals policy (over
// the tools named, brain.ToolNames and the parts') and the thread-replies mode.
func SettingsChecks(models *Models, tools []string) map[string]func(string) error {
	model := settings.Unsupported("this deployment runs one model (it has no model factory)")
	if models != nil {
		model = func(v string) error { _, err := models.Agent(v); return err }
	}
	return map[string]func(string) error{
		settings.Model:         model,
		settings.Approvals:     func(v string) error { _, err := ParseToolApproval(v, tools); return err },
		settings.ThreadReplies: func(v string) error { _, err := ParseThreadReplies(v); return err },
	}
}

// channelTurn is what a turn runs under from its channel's settings; the zero value (no
// Features.Settings) is the deployment's configuration.
type channelTurn struct {
	on       bool
	ch       settings.Channel
	agent    Agent         // nil: Deps.Agent
	approval *ToolApproval // nil: RunnerConfig.Approval.Policy
	replies  ThreadReplies // "": RunnerConfig.ThreadReplies
	model    string        // the model spec the agent runs
}

// loadChannel reads the channel's settings for the turn. A setting that no longer parses (a
// provider's key removed since an admin set it) is logged and falls back: a model to the
// default, an approvals policy to asking before every tool. Errors are the store's: a turn
// never runs under settings it could not read.
func (t *turn) loadChannel(ctx context.Context) error {
	key := t.sess.Key
	if t.features.Settings == nil {
		return nil
	}
	ch, err := t.features.Settings.For(ctx, key.Team, key.Channel)
	if err != nil {
		return fmt.Errorf("the settings of %s: %w", key.Channel, err)
	}
	ct := channelTurn{on: true, ch: ch, model: ch.Value(settings.Model)}
	if _, ok := ch.Record(settings.Model); ok && t.features.Models != nil {
		if ct.agent, err = t.features.Models.Agent(ct.model); err != nil {
			t.log.Warn().Err(err).Msg("the channel's model cannot be used: the turn runs the default one")
			ct.agent, ct.model = nil, t.features.Settings.Default(settings.Model)
		}
	}
	if v, ok := ch.Record(settings.Approvals); ok {
		p, err := ParseToolApproval(v.New, t.cfg.Approval.tools())
		if err != nil {
			t.log.Warn().Err(err).Msg("the channel's approvals policy does not parse: every tool asks")
			p, _ = ParseToolApproval("*=ask", nil)
		}
		ct.approval = &p
	}
	if v, ok := ch.Record(settings.ThreadReplies); ok {
		if m, err := ParseThreadReplies(v.New); err == nil {
			ct.replies = m
		}
	}
	t.channel = ct
	return nil
}

// threadReplies is the channel's thread-replies mode.
func (t *turn) threadReplies() ThreadReplies {
	if t.channel.replies != "" {
		return t.channel.replies
	}
	return t.cfg.ThreadReplies
}

// approvalPolicy is the channel's approvals policy.
func (t *turn) approvalPolicy() ToolApproval {
	if t.channel.approval != nil {
		return *t.channel.approval
	}
	return t.cfg.Approval.Policy
}

// channelAgent is the agent of the channel's model.
func (t *turn) channelAgent() Agent {
	if t.channel.agent != nil {
		return t.channel.agent
	}
	return t.agent
}
