package bot

import (
	"context"
	"errors"
	"fmt"

	"golang.org/x/sync/errgroup"

	"github.com/logbook/logbook/bot/telemetry"
)

// ServiceConfig configures a Service: one config per part. Zero values take the parts'
// defaults (which live in NewRunner, NewGateway and NewDeliverer, and nowhere else).
type ServiceConfig struct {
	Runner   RunnerConfig
	Gateway  GatewayConfig
	Delivery DeliveryConfig
}

// Service is logbook's bot: the Socket Mode gateway and the runner with its cells, run
// under one errgroup. serve runs it beside its other parts (the search indexer, the audit
// scheduler, the HTTP server); dev and the tests start it the same way.
type Service struct {
	gateway *Gateway
	runner  *Runner
}

// NewService wires a Service. It contacts nothing.
func NewService(cfg ServiceConfig, d Deps) (*Service, error) {
	switch {
	case d.API == nil || d.Socket == nil:
		return nil, errors.New("new service: no Slack client")
	case d.Store == nil || d.GatewayStore == nil:
		return nil, errors.New("new service: no session store")
	case d.Agent == nil:
		return nil, errors.New("new service: no agent")
	case d.Metrics == nil:
		return nil, errors.New("new service: no metrics")
	case cfg.Runner.Heartbeat > 0 && cfg.Runner.Peer == nil:
		return nil, errors.New("new service: a heartbeat claim (RunnerConfig.Heartbeat) needs a peer inbox (RunnerConfig.Peer): " +
			"the replica LISTENs for nothing, so its wakes must be posted to it")
	}
	if d.Deliver == nil {
		d.Deliver = NewDeliverer(d.API, d.Log.With().Str("part", "delivery").Logger(), d.Metrics, withClock(cfg.Delivery, d.Clock))
	}
	cells := d
	cells.Log = d.Log.With().Str("part", "cells").Logger()
	runner := NewRunner(cells, cfg.Runner)
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
	gw := newGateway(d.Log.With().Str("part", "gateway").Logger(), d.GatewayStore, d.API, d.Socket, d.Me, runner.Stored,
		d.Metrics, d.Features.Slash, d.Features.Health, d.Features.Directory, cfg.Gateway)
	gw.tracer = telemetry.Tracer(d.Tracer)
	gw.surfaces = d.Surfaces
	gw.ready = runner.deps.firstClaim
	return &Service{gateway: gw, runner: runner}, nil
}

func withClock(c DeliveryConfig, clock Clock) DeliveryConfig {
	if c.Clock == nil {
		c.Clock = clock
	}
	return c
}

// Runner is the service's runner (for dev's /evict and /status).
func (s *Service) Runner() *Runner { return s.runner }

// Run runs the gateway and the runner until ctx ends or one fails (which stops the other),
// and returns after both have returned: the runner after its drain (RunnerConfig.DrainTimeout).
// Either ending because its ctx did is no error; another error is reported under its name
// ("gateway" or "cells").
func (s *Service) Run(ctx context.Context) error {
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { return stopped("gateway", s.gateway.Run(ctx)) })
	g.Go(func() error { return stopped("cells", s.runner.Run(ctx)) })
	return g.Wait()
}

// stopped is what one of the service's two parts returning err means for Run: nil when it
// ended with its ctx, else err under the part's name.
func stopped(name string, err error) error {
	if err == nil || errors.Is(err, context.Canceled) {
		return nil
	}
	return fmt.Errorf("%s: %w", name, err)
}
