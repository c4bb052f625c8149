package bot

import (
	"context"
	"sync"

	"github.com/rs/zerolog"
	"github.com/slack-go/slack"
	"github.com/slack-go/slack/socketmode"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/logbook/logbook/bot/brain"
	"github.com/logbook/logbook/bot/directory"
	"github.com/logbook/logbook/bot/hands"
	"github.com/logbook/logbook/bot/part"
	"github.com/logbook/logbook/bot/settings"
	"github.com/logbook/logbook/session"
	"github.com/logbook/logbook/session/filestore"
)

// Deps is everything the bot works with, listed once: cmd/logbook (or a test) builds it, and
// NewService and NewRunner hand it down unchanged to the gateway, the runner and every cell.
// Store, Agent and Metrics are required; NewService also needs API, Socket and GatewayStore,
// NewRunner needs Deliver. A new optional part is a field of Features, set where the Deps is
// built and read where it is used: nothing in between lists it again. A capability of the
// turn is a part (Parts), never a field.
type Deps struct {
	Log zerolog.Logger
	// Store is the log the cells use; GatewayStore a store over a pool of its own, so an ack
	// never queues behind the cells' work (it may be the same store; NewService only). The
	// runner's lease renewals use GatewayStore too when set (one statement per interval per
	// replica): a renewal queued behind turns timed out and moved sessions (#33).
	Store        *session.Store
	GatewayStore *session.Store
	// API is the Web API client (bot token), Socket the Socket Mode client built on it, Me
	// the bot's identity (NewService only).
	API    *slack.Client
	Socket *socketmode.Client
	Me     Identity
	Agent  Agent
	// Deliver posts replies to threads: NewRunner needs it; NewService builds one from API
	// and ServiceConfig.Delivery when it is nil.
	Deliver *Deliverer
	Metrics *Metrics
	// DatabaseURL is for the dedicated LISTEN connection that hears other replicas; empty:
	// no listener (poll only). It also holds the runner's liveness claim
	// (session.ListenClaimed), so that other replicas may take this runner's sessions at
	// once if the process dies.
	DatabaseURL string
	Clock       Clock  // nil: the wall clock
	Probe       *Probe // nil: none
	// Tracer traces envelopes and turns (nil: no spans); see trace.go.
	Tracer trace.TracerProvider
	// Meter records turns, their latency (trace.go) and the brain's model calls' metrics
	// when the brain is given the same provider (nil: no metrics).
	Meter    metric.MeterProvider
	Features Features
	// Parts are the turn's optional parts (bot/part), offered in this order while each turn
	// is prepared: the tools, guidance and footer lines they give it. The engine knows none
	// by name; cmd/logbook lists them.
	Parts []part.Part
	// Surfaces answer Slack outside a turn: message shortcuts, buttons of their own, events
	// such as app_home_opened (surface.go), offered in this order after the gateway acks.
	Surfaces []Surface
}

// Features are the bot's optional parts: each left nil turns its feature off.
type Features struct {
	// Titler names a session once its first reply has reached the thread (nil: no titles).
	Titler Titler
	// Hands gives a session its sandbox (nil: no sandbox tools).
	Hands hands.Factory
	// Files keeps shared files' content, for the model (nil: files are only named to it); the
	// files part (files.Shared) fetches them.
	Files *filestore.Store
	// Channel returns a channel's name for the system prompt (nil: the id is used).
	Channel func(ctx context.Context, id string) string
	// Slash answers slash commands (nil: they get no answer).
	Slash SlashHandler
	// Health, when set, learns whether the gateway's appends succeed (serve's /readyz).
	Health *Health
	// Budget meters each turn's model calls against the channel's and the person's daily
	// budgets (nil: no budgets); its notices are a part (budget.Budget.Part).
	Budget Budget
	// Directory answers the gateway's channel and user look-ups (nil: the gateway keeps its
	// own); serve gives it the one its pages, slash commands and cells use.
	Directory *directory.Directory
	// Settings are the channels' settings as records, /logbook config (nil: the
	// configuration's alone); Models builds a channel's own model (nil: every channel runs
	// Agent). See loadChannel.
	Settings *settings.Settings
	Models   *Models
}

// Budget admits a turn's model calls (a *budget.Budget; Features.Budget).
type Budget interface {
	// For is the meter of one turn, whose calls count against channel's budget and person's.
	For(channel, person string, sess session.ID, turn int64) brain.Meter
}

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
