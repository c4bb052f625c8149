package bot

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"sync"

	"github.com/logbook/logbook/bot/brain"
	"github.com/logbook/logbook/bot/memory"
	"github.com/logbook/logbook/bot/settings"
	"github.com/logbook/logbook/session"
)

// Each channel its own agent (issue 31): the turn's side of a channel's settings
// (Features.Settings), its own model (Features.Models), its memory (Features.Memory) and the
// repository's instructions (Hands.Instructions). A turn reads them once, at its start
// (channelTurn), uses them in its phases (thread manners, approvals, the agent, the system
// prompt) and records what it ran under in a turn_settings event before its first model call.

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
// settings.Config.Check: the model (models nil: it cannot be set), the approvals policy and the
// thread-replies mode.
func SettingsChecks(models *Models) map[string]func(string) error {
	model := settings.Unsupported("this deployment runs one model (it has no model factory)")
	if models != nil {
		model = func(v string) error { _, err := models.Agent(v); return err }
	}
	return map[string]func(string) error{
		settings.Model:         model,
		settings.Approvals:     func(v string) error { _, err := ParseToolApproval(v, brain.ToolNames()); return err },
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
		p, err := ParseToolApproval(v.New, brain.ToolNames())
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

// guide gives the brain's turn the channel's instructions, the repository's instruction file,
// the channel's memory and the remember tool, then records what the turn runs under
// (turn_settings). What cannot be read is logged and left out: the turn goes on.
func (t *turn) guide(ctx context.Context, bt *brain.Turn) {
	key := t.sess.Key
	rec := session.TurnSettings{Turn: t.state.turnSeq}
	if t.channel.on {
		ch := t.channel.ch
		bt.Guidance.Instructions = ch.Value(settings.Instructions)
		rec.Model, rec.Instructions, rec.Approvals = t.channel.model, ch.Value(settings.Instructions), ch.Value(settings.Approvals)
		rec.ThreadReplies, rec.DailyBudget, rec.Setup = string(t.threadReplies()), ch.Value(settings.DailyBudget), ch.Value(settings.Setup)
		for _, n := range settings.Names {
			if _, ok := ch.Record(n); ok {
				rec.Set = append(rec.Set, n)
			}
		}
	}
	if t.hands != nil {
		r, err := t.hands.Instructions(ctx)
		if err != nil {
			t.log.Warn().Err(err).Msg("the repository's instruction file could not be read: the turn goes without it")
		}
		bt.Guidance.Repo = r.RepoInstructions
		rec.RepoInstructions, rec.RepoInstructionsHash = r.Path, r.Hash
		for _, n := range t.hands.NestedInstructions(ctx, t.flog.snapshot()) {
			bt.Guidance.Nested = append(bt.Guidance.Nested, n.RepoInstructions)
			rec.NestedInstructions = append(rec.NestedInstructions, n.Path+"@"+n.Hash)
		}
	}
	if m := t.features.Memory; m != nil {
		notes, err := m.Offer(ctx, key.Team, key.Channel)
		if err != nil {
			t.log.Warn().Err(err).Msg("the channel's memory could not be read: the turn goes without it")
		}
		for _, n := range notes {
			bt.Guidance.Memory = append(bt.Guidance.Memory, brain.Note{ID: n.ID, Text: n.Text, By: noteBy(n), At: n.At})
			rec.Memory = append(rec.Memory, n.ID)
		}
		bt.Remember = t.remember
	}
	if t.channel.on || rec.RepoInstructions != "" || len(rec.NestedInstructions) > 0 || len(rec.Memory) > 0 {
		t.recordSettings(ctx, rec)
	}
}

// noteBy says who asked for a note, for the model.
func noteBy(n session.Note) string {
	if n.ByKind == session.NoteByAgent {
		return memory.Who(n)
	}
	return "user " + n.By
}

// recordSettings appends turn_settings, unless the session's latest one has the same hash:
// a turn with no turn_settings of its own ran under the latest one before it, so an
// unchanged channel costs no append per turn and the log still says, for every reply, which
// settings produced it.
func (t *turn) recordSettings(ctx context.Context, rec session.TurnSettings) {
	rec.Hash = settingsHash(rec)
	for _, e := range slices.Backward(session.Select(t.flog.snapshot(), session.Range{Types: []session.Type{session.TypeTurnSettings}})) {
		var prev session.TurnSettings
		if e.Decode(&prev) == nil && prev.Hash == rec.Hash {
			return
		}
		break
	}
	if _, err := t.flog.Append(ctx, session.NewEvent{Type: session.TypeTurnSettings, Actor: cellActor, Payload: rec}); err != nil {
		t.log.Warn().Err(err).Msg("could not record the turn's settings")
	}
}

// settingsHash is the sha256 (hex) of rec without its turn and hash: the same settings give
// the same hash in every turn.
func settingsHash(rec session.TurnSettings) string {
	rec.Turn, rec.Hash = 0, ""
	b, _ := json.Marshal(rec)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// remember is the brain's Turn.Remember: a note of the channel's memory, asked by the agent in
// this session.
func (t *turn) remember(ctx context.Context, callID, text string) (string, error) {
	n, err := t.features.Memory.Remember(ctx, session.Note{Team: t.sess.Key.Team, Channel: t.sess.Key.Channel, Text: text,
		ByKind: session.NoteByAgent, By: t.cfg.Where.BotUserID, Session: t.sess.ID, ThreadTS: t.sess.Key.ThreadTS, CallID: callID})
	if err != nil {
		return "", err
	}
	t.log.Info().Int64("note", n.ID).Str("call_id", callID).Msg("the agent added a note to the channel's memory")
	return fmt.Sprintf("remembered as note %d of this channel's memory; people may remove it with /logbook forget %d", n.ID, n.ID), nil
}
