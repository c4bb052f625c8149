package main

import (
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/logbook/logbook/bot"
	"github.com/logbook/logbook/bot/hooks"
	"github.com/logbook/logbook/bot/schedule"
	"github.com/logbook/logbook/session"
)

// startedConfig is how sessions logbook starts itself run (issue 32): schedules
// (/logbook schedule) and signed hooks (POST /hooks/<name>).
type startedConfig struct {
	// MinInterval is the least time between two ticks of a schedule
	// (LOGBOOK_SCHEDULE_MIN_INTERVAL, default 1s).
	MinInterval time.Duration
	// Grace is how late a tick may run and still be on time (LOGBOOK_SCHEDULE_GRACE, 30s).
	Grace time.Duration
	// MaxFailures is how many runs of a schedule or hook may fail in a row before it pauses
	// itself (LOGBOOK_AUTOMATION_MAX_FAILURES, default 3).
	MaxFailures int
	// Hooks are LOGBOOK_HOOKS (nil: none).
	Hooks map[string]hooks.Hook `json:"-"`
	// HookWindow is how long a delivery id or body counts as a replay
	// (LOGBOOK_HOOK_REPLAY_WINDOW, 24h).
	HookWindow time.Duration
	// HookMaxBody is the largest hook body taken (LOGBOOK_HOOK_MAX_BODY, 256K).
	HookMaxBody int64
}

// readStarted reads the schedules' and hooks' settings.
func (cfg *serveConfig) readStarted(e env) error {
	r := envReader{e: e}
	cfg.Started = startedConfig{
		MinInterval: r.duration("LOGBOOK_SCHEDULE_MIN_INTERVAL"),
		Grace:       r.duration("LOGBOOK_SCHEDULE_GRACE"),
		MaxFailures: r.int("LOGBOOK_AUTOMATION_MAX_FAILURES"),
		HookWindow:  r.duration("LOGBOOK_HOOK_REPLAY_WINDOW"),
		HookMaxBody: r.bytes("LOGBOOK_HOOK_MAX_BODY"),
	}
	s := &cfg.Started
	if r.err != nil {
		return r.err
	}
	if s.MaxFailures < 0 || (s.MaxFailures == 0 && strings.TrimSpace(e.getenv("LOGBOOK_AUTOMATION_MAX_FAILURES")) != "") {
		return fmt.Errorf("LOGBOOK_AUTOMATION_MAX_FAILURES=%d: a number of failures in a row, at least 1 (default 3)", s.MaxFailures)
	}
	if s.MinInterval != 0 && s.MinInterval < time.Second {
		return fmt.Errorf("LOGBOOK_SCHEDULE_MIN_INTERVAL=%s: at least 1s (cron's finest step)", s.MinInterval)
	}
	var err error
	if s.Hooks, err = hooks.Parse(e.getenv("LOGBOOK_HOOKS"), e.getenv); err != nil {
		return fmt.Errorf("LOGBOOK_HOOKS: %w", err)
	}
	return nil
}

// buildStarted builds the Starter that schedules and hooks share, the scheduler (a service
// beside the bot; slashTable registers its /logbook schedule) and the hooks' handler (nil
// without LOGBOOK_HOOKS). The Starter signals sessions through w.signal, which serve sets to
// the runner's once it is built.
func (w *wiring) buildStarted(store *session.Store) {
	cfg := w.cfg
	starter := bot.NewStarter(w.api, store, func(id session.ID) {
		if signal := w.signal.Load(); signal != nil {
			(*signal)(id)
		} // else the runner is not built yet: its first poll finds the session's pending work
	}, w.me.TeamID)
	w.starter = starter
	hookChannels := map[string]string{}
	for name, h := range cfg.Started.Hooks {
		hookChannels[name] = h.Channel
	}
	w.scheduler = schedule.New(store, starter, schedule.Config{Owner: replicaOwner(), Team: w.me.TeamID, Admins: cfg.Admins,
		Grace: cfg.Started.Grace, ClaimTTL: cfg.LeaseTTL, MinInterval: cfg.Started.MinInterval, Names: w.dir.UserName, Slack: w.api,
		MaxFailures: cfg.Started.MaxFailures, Poster: w.api, Hooks: hookChannels, PublicURL: cfg.Footer.PublicURL, Registerer: w.reg,
		Log: w.log.With().Str("part", "schedules").Logger()})
	w.services = append(w.services, service{name: "schedules", run: w.scheduler.Run})
	if len(cfg.Started.Hooks) > 0 {
		w.hooks = hooks.New(store, starter, hooks.Options{Hooks: cfg.Started.Hooks, Window: cfg.Started.HookWindow,
			MaxBody: cfg.Started.HookMaxBody, MaxFailures: cfg.Started.MaxFailures, Admins: cfg.Admins, Poster: w.api,
			Registerer: w.reg, Log: w.log.With().Str("part", "hooks").Logger()})
		w.log.Info().Strs("hooks", w.hooks.Names()).Msg("hooks: POST /hooks/<name> starts a session (LOGBOOK_HOOKS)")
	}
}

// replicaOwner names this replica in the tick records.
func replicaOwner() string {
	host, _ := os.Hostname()
	return fmt.Sprintf("%s:%d:%d", strings.TrimSpace(host), os.Getpid(), time.Now().UnixNano()%1e6)
}
