package telemetry

import (
	"net/http"
	"strings"

	"github.com/exaring/otelpgx"
	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// SlackTransport wraps base (nil: http.DefaultTransport) so that each Web API call is a client
// span, "slack {method}" (e.g. slack chat.postMessage), a child of whatever span its request's
// context carries (the envelope's, the turn's). No trace header is sent to Slack.
func SlackTransport(tp trace.TracerProvider, base http.RoundTripper) http.RoundTripper {
	if base == nil {
		base = http.DefaultTransport
	}
	return otelhttp.NewTransport(base, otelhttp.WithTracerProvider(Or(tp)),
		otelhttp.WithMeterProvider(metricnoop.NewMeterProvider()),
		otelhttp.WithPropagators(propagation.NewCompositeTextMapPropagator()),
		otelhttp.WithSpanNameFormatter(func(_ string, r *http.Request) string {
			if _, method, ok := strings.Cut(r.URL.Path, "/api/"); ok && method != "" && !strings.Contains(method, "/") {
				return "slack " + method
			}
			return "slack " + r.Method // a file's download: its name stays out of the span's name
		}))
}

// PgxTracer traces a pgx pool's statements (one span each, "BEGIN" and "COMMIT" of an
// explicit transaction included), batches, copies and connections, with the SQL text but never
// its parameters (which hold the log's content). For session.PoolOptions.Tracer.
func PgxTracer(tp trace.TracerProvider) pgx.QueryTracer {
	return otelpgx.NewTracer(otelpgx.WithTracerProvider(Or(tp)), otelpgx.WithMeterProvider(metricnoop.NewMeterProvider()))
}
