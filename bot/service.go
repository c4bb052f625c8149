package bot

import (
	"context"
	"errors"
	"fmt"

	"github.com/rs/zerolog"
	"github.com/slack-go/slack"
	"github.com/slack-go/slack/socketmode"
	"golang.org/x/sync/errgroup"

	"github.com/logbook/logbook/bot/files"
	"github.com/logbook/logbook/session"
	"github.com/logbook/logbook/session/filestore"
)

// ServiceConfig configures a Service: one config per part. Zero values take the parts'
// defaults (which live in NewRunner, NewGateway and NewDeliverer, and nowhere else).
type ServiceConfig struct {
	Runner   RunnerConfig
	Gateway  GatewayConfig
	Delivery DeliveryConfig
}

// ServiceDeps are the Service's dependencies. API, Socket, Cells, Gateway, Agent and Metrics
// are required.
type ServiceDeps struct {
	Log zerolog.Logger
	// API is the Web API client (bot token); Socket the Socket Mode client built on it.
	API    *slack.Client
	Socket *socketmode.Client
	Me     Identity
	// Cells is the log the cells use; Gateway a store over a pool of its own, so an ack never
	// queues behind the cells' work (it may be the same store).
	Cells   *session.Store
	Gateway *session.Store
	// DatabaseURL is for the LISTEN connection that hears other replicas (empty: poll only).
	DatabaseURL string
	Agent       Agent
	Titler      Titler       // nil: no titles
	Hands       HandsFactory // nil: no sandbox tools
	// Files, Fetcher and Uploader: shared files in and out (nil: files are only named).
	Files    *filestore.Store
	Fetcher  *files.Fetcher
	Uploader Uploader
	Forge    Forge        // nil: no create_pull_request
	Search   Searcher     // nil: no search tool
	Slash    SlashHandler // nil: slash commands get no answer
	Metrics  *Metrics
	// Channel names a channel for the system prompt (nil: the id).
	Channel func(ctx context.Context, id string) string
	Clock   Clock  // nil: the wall clock
	Probe   *Probe // nil: none
	// Health, when set, learns whether the gateway's appends succeed (serve's /readyz).
	Health *Health
	// Directory answers the gateway's channel and user look-ups (nil: the gateway keeps its
	// own); serve gives it the one its pages, slash commands and cells use.
	Directory *Directory
	// Parts run beside the gateway and the runner (the search indexer, the audit scheduler,
	// the HTTP server); each Run returns when its ctx ends.
	Parts []Part
}

// Part is a long-lived piece of the service.
type Part struct {
	Name string
	Run  func(ctx context.Context) error
}

// Service is logbook's bot: the gateway, the runner with its cells, and the parts beside them,
// run under one errgroup — serve, dev and the tests all start it the same way.
type Service struct {
	gateway *Gateway
	runner  *Runner
	parts   []Part
}

// NewService wires a Service. It contacts nothing.
func NewService(cfg ServiceConfig, d ServiceDeps) (*Service, error) {
	switch {
	case d.API == nil || d.Socket == nil:
		return nil, errors.New("new service: no Slack client")
	case d.Cells == nil || d.Gateway == nil:
		return nil, errors.New("new service: no session store")
	case d.Agent == nil:
		return nil, errors.New("new service: no agent")
	case d.Metrics == nil:
		return nil, errors.New("new service: no metrics")
	}
	deliver := NewDeliverer(d.API, d.Log.With().Str("part", "delivery").Logger(), d.Metrics, withClock(cfg.Delivery, d.Clock))
	runner := NewRunner(RunnerDeps{Log: d.Log.With().Str("part", "cells").Logger(), Store: d.Cells, Agent: d.Agent,
		Titler: d.Titler, Deliver: deliver, Hands: d.Hands, Search: d.Search, Files: d.Files, Fetcher: d.Fetcher,
		Uploader: d.Uploader, Forge: d.Forge, Metrics: d.Metrics, Channel: d.Channel,
		DatabaseURL: d.DatabaseURL, Clock: d.Clock, Probe: d.Probe}, cfg.Runner)
	// Who may decide an approval card is the runner's setting: the card says so, the gateway
	// enforces it.
	cfg.Gateway.Approvers = cfg.Runner.Approval.Approvers
	if cfg.Runner.Approval.Policy.Asks() && cfg.Runner.Approval.Approvers.users == nil {
		d.Log.Warn().Msg("LOGBOOK_TOOL_APPROVAL asks for approvals and LOGBOOK_TOOL_APPROVERS is unset: anyone who has posted in a thread " +
			"(a guest of a shared channel, or whoever wrote the prompt) may approve its calls; set LOGBOOK_TOOL_APPROVERS to a list of user ids to restrict it")
	}
	if cfg.Gateway.Clock == nil {
		cfg.Gateway.Clock = d.Clock
	}
	gw := newGateway(d.Log.With().Str("part", "gateway").Logger(), d.Gateway, d.API, d.Socket, d.Me, runner.Signal,
		d.Metrics, d.Slash, d.Health, d.Directory, cfg.Gateway)
	return &Service{gateway: gw, runner: runner, parts: d.Parts}, nil
}

func withClock(c DeliveryConfig, clock Clock) DeliveryConfig {
	if c.Clock == nil {
		c.Clock = clock
	}
	return c
}

// Runner is the service's runner (for dev's /evict and /status).
func (s *Service) Runner() *Runner { return s.runner }

// Run runs every part until ctx ends or one fails (which stops the others), and returns
// after all of them have returned.
func (s *Service) Run(ctx context.Context) error {
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { return named("gateway", s.gateway.Run(ctx)) })
	g.Go(func() error { return named("cells", s.runner.Run(ctx)) })
	for _, p := range s.parts {
		g.Go(func() error { return named(p.Name, p.Run(ctx)) })
	}
	return g.Wait()
}

func named(part string, err error) error {
	if err == nil || errors.Is(err, context.Canceled) {
		return nil
	}
	return fmt.Errorf("%s: %w", part, err)
}
