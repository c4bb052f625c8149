package bot

import (
	"go.opentelemetry.io/otel/trace"

	"github.com/logbook/logbook/bot/telemetry"
)

// SetGatewayTracer gives a gateway built by NewGateway a tracer (NewService sets it from
// Deps.Tracer), for the ack breakdown.
func SetGatewayTracer(g *Gateway, tp trace.TracerProvider) { g.tracer = telemetry.Tracer(tp) }
