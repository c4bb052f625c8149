package bot

import (
	"context"
	"fmt"
	"sync"

	"github.com/logbook/logbook/bot/settings"
	"github.com/logbook/logbook/session"
	"github.com/rs/zerolog"
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

// channelTurn is what a turn runs under from its channel's settings, else the deployment's
// configuration (no Features.Settings, or a setting the channel left at its default).
type channelTurn struct {
	on       bool // the deployment keeps channel settings: ch is the channel's
	ch       settings.Channel
	agent    Agent         // the channel's model's, else Deps.Agent
	approval ToolApproval  // the channel's approvals policy, else RunnerConfig.Approval.Policy
	own      bool          // approval is the channel's own (/logbook config approvals)
	replies  ThreadReplies // the channel's thread-replies mode, else RunnerConfig.ThreadReplies
	model    string        // the model spec the agent runs
}

// loadChannel reads what the turn of session key runs under. A setting that no longer parses
// (a provider's key removed since an admin set it) is logged and falls back: a model to the
// default, an approvals policy to asking before every tool. Errors are the store's: a turn
// never runs under settings it could not read.
func loadChannel(ctx context.Context, f Features, cfg *RunnerConfig, agent Agent, key session.ThreadKey, log zerolog.Logger) (channelTurn, error) {
	ct := channelTurn{agent: agent, approval: cfg.Approval.Policy, replies: cfg.ThreadReplies}
	if f.Settings == nil {
		return ct, nil
	}
	ch, err := f.Settings.For(ctx, key.Team, key.Channel)
	if err != nil {
		return ct, fmt.Errorf("the settings of %s: %w", key.Channel, err)
	}
	ct.on, ct.ch, ct.model = true, ch, ch.Value(settings.Model)
	if _, ok := ch.Record(settings.Model); ok && f.Models != nil {
		if a, err := f.Models.Agent(ct.model); err != nil {
			log.Warn().Err(err).Msg("the channel's model cannot be used: the turn runs the default one")
			ct.model = f.Settings.Default(settings.Model)
		} else {
			ct.agent = a
		}
	}
	if v, ok := ch.Record(settings.Approvals); ok {
		p, err := ParseToolApproval(v.New, cfg.Approval.tools())
		if err != nil {
			log.Warn().Err(err).Msg("the channel's approvals policy does not parse: every tool asks")
			p, _ = ParseToolApproval("*=ask", nil)
		}
		ct.approval, ct.own = p, true
	}
	if v, ok := ch.Record(settings.ThreadReplies); ok {
		if m, err := ParseThreadReplies(v.New); err == nil {
			ct.replies = m
		}
	}
	return ct, nil
}
