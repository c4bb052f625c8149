// Package otlptest is an in-process OTLP/HTTP receiver for tests: an HTTP server that decodes
// what an OTLP exporter sends to /v1/traces, /v1/metrics and /v1/logs (protobuf, optionally
// gzipped) with the OTLP protocol's own Go types, and answers as a collector does. Provider
// and MeterProvider give real SDK providers that export to it.
package otlptest

import (
	"compress/gzip"
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetrichttp"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdkresource "go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	collogspb "go.opentelemetry.io/proto/otlp/collector/logs/v1"
	colmetricpb "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	"google.golang.org/protobuf/proto"
)

// Span is one received span, flattened.
type Span struct {
	Name     string
	TraceID  string // hex
	SpanID   string
	ParentID string // "" for a root span
	Kind     string // "SPAN_KIND_CLIENT", ...
	Scope    string // the instrumentation scope's name
	Attrs    map[string]any
	Links    []string // the linked spans' span ids
	Error    bool     // status code error
	Resource map[string]any
}

// Log is one received log record, flattened.
type Log struct {
	Time      time.Time
	EventName string
	Body      string // a string body
	Scope     string
	Attrs     map[string]any
	Resource  map[string]any
}

// Point is one data point of a received metric: a sum's or gauge's Value, or a histogram's
// Count and Sum, with its attributes.
type Point struct {
	Attrs map[string]any
	Value float64 // sums and gauges (ints as floats)
	Count uint64  // histograms
	Sum   float64 // histograms
}

// Metric is one received metric of one export, flattened.
type Metric struct {
	Name     string
	Unit     string
	Kind     string // "sum", "gauge", "histogram"
	Scope    string
	Points   []Point
	Resource map[string]any
}

// Receiver is a running OTLP/HTTP receiver of traces (URL + "/v1/traces") and logs
// (URL + "/v1/logs").
type Receiver struct {
	URL string // the endpoint, e.g. http://127.0.0.1:1234

	srv *httptest.Server

	mu       sync.Mutex
	spans    []Span
	logs     []Log
	metrics  []Metric
	requests int
	refused  int // export requests answered with fail
	fail     int // the status to answer every export with (0: take them)
	// received is signalled (without blocking) after each export request is taken.
	received chan struct{}
}

// Start starts a receiver, closed when the test ends.
func Start(tb testing.TB) *Receiver {
	r := &Receiver{received: make(chan struct{}, 1)}
	r.srv = httptest.NewServer(http.HandlerFunc(r.serve))
	r.URL = r.srv.URL
	tb.Cleanup(r.srv.Close)
	return r
}

func (r *Receiver) serve(w http.ResponseWriter, req *http.Request) {
	if req.Method != http.MethodPost || (req.URL.Path != "/v1/traces" && req.URL.Path != "/v1/logs" && req.URL.Path != "/v1/metrics") {
		http.Error(w, "not found", http.StatusNotFound)
		return
	}
	if ct := req.Header.Get("Content-Type"); ct != "application/x-protobuf" {
		http.Error(w, "unsupported content type "+ct, http.StatusUnsupportedMediaType)
		return
	}
	var body io.Reader = req.Body
	if req.Header.Get("Content-Encoding") == "gzip" {
		gz, err := gzip.NewReader(req.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		defer gz.Close()
		body = gz
	}
	raw, err := io.ReadAll(body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	r.mu.Lock()
	fail := r.fail
	if fail != 0 {
		r.refused++
	}
	r.mu.Unlock()
	if fail != 0 {
		http.Error(w, "refused by the test", fail)
		return
	}
	var out []byte
	if req.URL.Path == "/v1/metrics" {
		var export colmetricpb.ExportMetricsServiceRequest
		if err := proto.Unmarshal(raw, &export); err != nil {
			http.Error(w, "decode: "+err.Error(), http.StatusBadRequest)
			return
		}
		r.addMetrics(&export)
		out, _ = proto.Marshal(&colmetricpb.ExportMetricsServiceResponse{})
	} else if req.URL.Path == "/v1/logs" {
		var export collogspb.ExportLogsServiceRequest
		if err := proto.Unmarshal(raw, &export); err != nil {
			http.Error(w, "decode: "+err.Error(), http.StatusBadRequest)
			return
		}
		r.addLogs(&export)
		out, _ = proto.Marshal(&collogspb.ExportLogsServiceResponse{})
	} else {
		var export coltracepb.ExportTraceServiceRequest
		if err := proto.Unmarshal(raw, &export); err != nil {
			http.Error(w, "decode: "+err.Error(), http.StatusBadRequest)
			return
		}
		r.add(&export)
		out, _ = proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	}
	select {
	case r.received <- struct{}{}:
	default:
	}
	w.Header().Set("Content-Type", "application/x-protobuf")
	w.Write(out)
}

func (r *Receiver) addLogs(export *collogspb.ExportLogsServiceRequest) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.requests++
	for _, rl := range export.GetResourceLogs() {
		res := attrs(rl.GetResource().GetAttributes())
		for _, sl := range rl.GetScopeLogs() {
			for _, l := range sl.GetLogRecords() {
				r.logs = append(r.logs, Log{Time: time.Unix(0, int64(l.GetTimeUnixNano())), EventName: l.GetEventName(),
					Body: l.GetBody().GetStringValue(), Scope: sl.GetScope().GetName(), Attrs: attrs(l.GetAttributes()), Resource: res})
			}
		}
	}
}

func (r *Receiver) addMetrics(export *colmetricpb.ExportMetricsServiceRequest) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.requests++
	for _, rm := range export.GetResourceMetrics() {
		res := attrs(rm.GetResource().GetAttributes())
		for _, sm := range rm.GetScopeMetrics() {
			for _, m := range sm.GetMetrics() {
				out := Metric{Name: m.GetName(), Unit: m.GetUnit(), Scope: sm.GetScope().GetName(), Resource: res}
				switch {
				case m.GetSum() != nil:
					out.Kind = "sum"
					for _, p := range m.GetSum().GetDataPoints() {
						out.Points = append(out.Points, Point{Attrs: attrs(p.GetAttributes()), Value: p.GetAsDouble() + float64(p.GetAsInt())})
					}
				case m.GetGauge() != nil:
					out.Kind = "gauge"
					for _, p := range m.GetGauge().GetDataPoints() {
						out.Points = append(out.Points, Point{Attrs: attrs(p.GetAttributes()), Value: p.GetAsDouble() + float64(p.GetAsInt())})
					}
				case m.GetHistogram() != nil:
					out.Kind = "histogram"
					for _, p := range m.GetHistogram().GetDataPoints() {
						out.Points = append(out.Points, Point{Attrs: attrs(p.GetAttributes()), Count: p.GetCount(), Sum: p.GetSum()})
					}
				}
				r.metrics = append(r.metrics, out)
			}
		}
	}
}

// Metrics returns every metric received so far, one per export that carried it (with
// cumulative temporality, the SDK's default, the last of a name is its latest state).
func (r *Receiver) Metrics() []Metric {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Metric(nil), r.metrics...)
}

// Metric is the latest received state of the metric named name; ok is false when none arrived.
func (r *Receiver) Metric(name string) (m Metric, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := len(r.metrics) - 1; i >= 0; i-- {
		if r.metrics[i].Name == name {
			return r.metrics[i], true
		}
	}
	return Metric{}, false
}

// Logs returns every log record received so far.
func (r *Receiver) Logs() []Log {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Log(nil), r.logs...)
}

// Received is signalled after an export request was taken (a wake-up, not a count: read Logs or
// Spans again after it).
func (r *Receiver) Received() <-chan struct{} { return r.received }

func (r *Receiver) add(export *coltracepb.ExportTraceServiceRequest) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.requests++
	for _, rs := range export.GetResourceSpans() {
		res := attrs(rs.GetResource().GetAttributes())
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				sp := Span{Name: s.GetName(), TraceID: hex.EncodeToString(s.GetTraceId()), SpanID: hex.EncodeToString(s.GetSpanId()),
					ParentID: hex.EncodeToString(s.GetParentSpanId()), Kind: s.GetKind().String(), Scope: ss.GetScope().GetName(),
					Attrs: attrs(s.GetAttributes()), Error: s.GetStatus().GetCode().String() == "STATUS_CODE_ERROR", Resource: res}
				for _, l := range s.GetLinks() {
					sp.Links = append(sp.Links, hex.EncodeToString(l.GetSpanId()))
				}
				r.spans = append(r.spans, sp)
			}
		}
	}
}

// attrs flattens OTLP attributes: strings, bools, int64s, float64s and []any of those.
func attrs(kvs []*commonpb.KeyValue) map[string]any {
	m := map[string]any{}
	for _, kv := range kvs {
		m[kv.GetKey()] = value(kv.GetValue())
	}
	return m
}

func value(v *commonpb.AnyValue) any {
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_StringValue:
		return x.StringValue
	case *commonpb.AnyValue_BoolValue:
		return x.BoolValue
	case *commonpb.AnyValue_IntValue:
		return x.IntValue
	case *commonpb.AnyValue_DoubleValue:
		return x.DoubleValue
	case *commonpb.AnyValue_ArrayValue:
		var out []any
		for _, e := range x.ArrayValue.GetValues() {
			out = append(out, value(e))
		}
		return out
	}
	return fmt.Sprint(v)
}

// Spans returns every span received so far.
func (r *Receiver) Spans() []Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Span(nil), r.spans...)
}

// Fail makes the receiver answer every export request with status (a collector that is
// down: 500, 503), keeping nothing of it, until Fail(0).
func (r *Receiver) Fail(status int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.fail = status
}

// Refused is how many export requests were answered with Fail's status.
func (r *Receiver) Refused() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.refused
}

// Requests is how many export requests arrived.
func (r *Receiver) Requests() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.requests
}

// Provider returns an SDK tracer provider that batches spans to r over OTLP/HTTP (the
// exporter logbook serve uses), sampling every span; it is shut down when the test ends.
// Flush it (ForceFlush) before reading Spans.
func (r *Receiver) Provider(tb testing.TB) *sdktrace.TracerProvider {
	tb.Helper()
	client := &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}
	exp, err := otlptracehttp.New(context.Background(), otlptracehttp.WithEndpointURL(r.URL+"/v1/traces"),
		otlptracehttp.WithHTTPClient(client))
	if err != nil {
		tb.Fatal(err)
	}
	res, err := sdkresource.New(context.Background(), sdkresource.WithAttributes(attribute.String("service.name", "logbook-test")))
	if err != nil {
		tb.Fatal(err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp, sdktrace.WithBatchTimeout(50*time.Millisecond)),
		sdktrace.WithSampler(sdktrace.AlwaysSample()), sdktrace.WithResource(res))
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := tp.Shutdown(ctx); err != nil {
			tb.Errorf("shut the tracer provider down: %v", err)
		}
		client.CloseIdleConnections()
	})
	return tp
}

// MeterProvider returns an SDK meter provider that exports to r over OTLP/HTTP (the exporter
// logbook serve uses); it is shut down when the test ends. Flush it (ForceFlush) before reading
// Metrics: its periodic export is an hour apart, so only a flush exports.
func (r *Receiver) MeterProvider(tb testing.TB) *sdkmetric.MeterProvider {
	tb.Helper()
	client := &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}
	exp, err := otlpmetrichttp.New(context.Background(), otlpmetrichttp.WithEndpointURL(r.URL+"/v1/metrics"),
		otlpmetrichttp.WithHTTPClient(client))
	if err != nil {
		tb.Fatal(err)
	}
	res, err := sdkresource.New(context.Background(), sdkresource.WithAttributes(attribute.String("service.name", "logbook-test")))
	if err != nil {
		tb.Fatal(err)
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewPeriodicReader(exp, sdkmetric.WithInterval(time.Hour))),
		sdkmetric.WithResource(res))
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := mp.Shutdown(ctx); err != nil {
			tb.Errorf("shut the meter provider down: %v", err)
		}
		client.CloseIdleConnections()
	})
	return mp
}
