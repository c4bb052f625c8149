package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetricgrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetrichttp"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	otelmetric "go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// tracingConfig is what the standard OTEL_* variables and LOGBOOK_TRACE_CONTENT ask of
// tracing. Only whether it is on and the protocol are read here; the exporter, the sampler, the
// batch processor and the resource read the rest of the OTEL_* variables themselves (the
// OpenTelemetry SDK's own handling): OTEL_EXPORTER_OTLP_HEADERS, _TIMEOUT, _COMPRESSION,
// _CERTIFICATE, OTEL_TRACES_SAMPLER(_ARG), OTEL_BSP_*, OTEL_SERVICE_NAME,
// OTEL_RESOURCE_ATTRIBUTES, OTEL_SPAN_*_LIMIT, ...
type tracingConfig struct {
	// Endpoint is OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or OTEL_EXPORTER_OTLP_ENDPOINT; "": off.
	Endpoint string
	// Protocol is OTEL_EXPORTER_OTLP_TRACES_PROTOCOL or OTEL_EXPORTER_OTLP_PROTOCOL: grpc,
	// http/protobuf (default) or http/json.
	Protocol string
	// Content puts prompts, completions and tools' input and output in spans
	// (LOGBOOK_TRACE_CONTENT=on); off by default.
	Content bool
	// MetricsEndpoint is OTEL_EXPORTER_OTLP_METRICS_ENDPOINT or OTEL_EXPORTER_OTLP_ENDPOINT;
	// "": no OTLP metrics. MetricsProtocol is as Protocol, for metrics.
	MetricsEndpoint, MetricsProtocol string
}

// readTracing reads the tracing settings. Tracing is off unless an OTLP endpoint is set, and
// off whenever OTEL_SDK_DISABLED=true or OTEL_TRACES_EXPORTER=none.
func (cfg *serveConfig) readTracing(e env) error {
	var err error
	if cfg.Tracing.Content, err = envBool(e, "LOGBOOK_TRACE_CONTENT", false); err != nil {
		return err
	}
	t := &cfg.Tracing
	if t.Endpoint, t.Protocol, err = otlpSignal(e, "TRACES", "OTEL_EXPORTER_OTLP_PROTOCOL",
		"logbook exports traces over OTLP only (otlp, or none)"); err != nil {
		return err
	}
	if t.MetricsEndpoint, t.MetricsProtocol, err = otlpSignal(e, "METRICS", "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL",
		"logbook exports metrics over OTLP only (otlp, or none; /metrics serves Prometheus)"); err != nil {
		return err
	}
	if strings.EqualFold(strings.TrimSpace(e.getenv("OTEL_SDK_DISABLED")), "true") {
		t.Endpoint, t.MetricsEndpoint = "", ""
	}
	return nil
}

func firstEnv(e env, names ...string) string {
	for _, n := range names {
		if v := strings.TrimSpace(e.getenv(n)); v != "" {
			return v
		}
	}
	return ""
}

// startTracing returns the tracer provider that every part is given, and its shutdown (which
// exports what is left). Off, it is a no-op provider: no exporter, no goroutine, nothing
// recorded.
func startTracing(ctx context.Context, t tracingConfig) (trace.TracerProvider, func(context.Context) error, error) {
	if t.Endpoint == "" {
		return noop.NewTracerProvider(), func(context.Context) error { return nil }, nil
	}
	var exp sdktrace.SpanExporter
	var err error
	if t.Protocol == "grpc" {
		exp, err = otlptracegrpc.New(ctx) // endpoint, headers, TLS, ... from OTEL_EXPORTER_OTLP_*
	} else {
		exp, err = otlptracehttp.New(ctx)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("OpenTelemetry OTLP exporter (OTEL_EXPORTER_OTLP_*): %w", err)
	}
	res, err := otelResource(ctx)
	if err != nil {
		return nil, nil, err
	}
	// The sampler comes from OTEL_TRACES_SAMPLER (default: parent-based, always on).
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	return tp, func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		return tp.Shutdown(ctx)
	}, nil
}

// otelResource is the resource of logbook's spans and metrics: service name logbook unless
// OTEL_SERVICE_NAME or OTEL_RESOURCE_ATTRIBUTES say otherwise (later options win).
func otelResource(ctx context.Context) (*resource.Resource, error) {
	res, err := resource.New(ctx, resource.WithAttributes(attribute.String("service.name", "logbook")),
		resource.WithTelemetrySDK(), resource.WithHost(), resource.WithFromEnv())
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		return nil, fmt.Errorf("OpenTelemetry resource (OTEL_RESOURCE_ATTRIBUTES, OTEL_SERVICE_NAME): %w", err)
	}
	return res, nil
}

// startMetrics returns the meter provider of the GenAI and turn metrics (telemetry.Metrics),
// exporting over OTLP every OTEL_METRIC_EXPORT_INTERVAL (the SDK's default: 60 s), and its
// shutdown (which exports what is left). Off, it is a no-op provider.
func startMetrics(ctx context.Context, t tracingConfig) (otelmetric.MeterProvider, func(context.Context) error, error) {
	if t.MetricsEndpoint == "" {
		return metricnoop.NewMeterProvider(), func(context.Context) error { return nil }, nil
	}
	var exp sdkmetric.Exporter
	var err error
	if t.MetricsProtocol == "grpc" {
		exp, err = otlpmetricgrpc.New(ctx) // endpoint, headers, TLS, temporality, ... from OTEL_EXPORTER_OTLP_*
	} else {
		exp, err = otlpmetrichttp.New(ctx)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("OpenTelemetry OTLP metric exporter (OTEL_EXPORTER_OTLP_*): %w", err)
	}
	res, err := otelResource(ctx)
	if err != nil {
		return nil, nil, err
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewPeriodicReader(exp)), sdkmetric.WithResource(res))
	return mp, func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		return mp.Shutdown(ctx)
	}, nil
}

// otlpSignal reads one OTLP signal's endpoint and protocol (signal TRACES or METRICS), the
// signal's own variables before the shared ones; OTEL_<signal>_EXPORTER=none turns it off.
// protocolName and onlyOTLP word its errors.
func otlpSignal(e env, signal, protocolName, onlyOTLP string) (endpoint, protocol string, err error) {
	endpoint = firstEnv(e, "OTEL_EXPORTER_OTLP_"+signal+"_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
	protocol = strings.ToLower(firstEnv(e, "OTEL_EXPORTER_OTLP_"+signal+"_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"))
	switch protocol {
	case "", "grpc", "http/protobuf", "http/json":
	default:
		return "", "", fmt.Errorf("%s=%q: want grpc, http/protobuf or http/json", protocolName, protocol)
	}
	switch v := strings.ToLower(strings.TrimSpace(e.getenv("OTEL_" + signal + "_EXPORTER"))); v {
	case "", "otlp":
	case "none":
		endpoint = ""
	default:
		return "", "", fmt.Errorf("OTEL_%s_EXPORTER=%q: %s", signal, v, onlyOTLP)
	}
	return endpoint, protocol, nil
}
