package audit

import (
	"bytes"
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"

	collogspb "go.opentelemetry.io/proto/otlp/collector/logs/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	logspb "go.opentelemetry.io/proto/otlp/logs/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
	"google.golang.org/protobuf/proto"

	"github.com/logbook/logbook/session"
)

// The continuous audit stream (issue 51): every event of the log, as it is committed, in the
// export's own JSON line (EventLine: the same fields and the same rule for a payload purged by
// retention: null, "purged": true), so a receiver can check each line's chain position (session
// id, seq, prev_hash, hash) against the last it saw of that session. A Stream is a sink of the
// tailer (bot/stream): at least once, in commit order, from a durable cursor.

// Place is where an event's session is: its channel and thread (the export's channel_id and
// thread_ts).
type Place struct {
	Channel  string
	ThreadTS string
}

// EventLine renders e, of the session at place, as the export's JSON line (with its newline).
func EventLine(b []byte, e session.Event, place Place) []byte {
	v := make([][]byte, len(eventColumns))
	v[0] = strconv.AppendInt(nil, e.Position, 10)
	v[1] = []byte(e.SessionID.String())
	v[2] = []byte(place.Channel)
	v[3] = []byte(place.ThreadTS)
	v[4] = strconv.AppendInt(nil, e.Seq, 10)
	v[5] = []byte(e.ID.String())
	v[6] = []byte(e.Type)
	v[7] = []byte(e.Actor.Kind)
	v[8] = []byte(e.Actor.ID)
	v[9] = []byte(e.CreatedAt.UTC().Format("2006-01-02T15:04:05.000000Z"))
	if e.Payload != nil {
		v[10] = e.Payload
	}
	v[11] = hexOrNil(e.PayloadHash)
	v[12] = hexOrNil(e.PrevHash)
	v[13] = hexOrNil(e.Hash)
	if e.IdempotencyKey != "" {
		v[14] = []byte(e.IdempotencyKey)
	}
	v[15] = []byte("f")
	if e.Sanitized {
		v[15] = []byte("t")
	}
	return appendEventJSON(b, v)
}

func hexOrNil(b []byte) []byte {
	if b == nil {
		return nil
	}
	return []byte(hex.EncodeToString(b))
}

// PlaceStore finds sessions' places (*session.Store).
type PlaceStore interface {
	Session(ctx context.Context, id session.ID) (session.Session, error)
	Sessions(ctx context.Context, ids []session.ID) (map[session.ID]session.Session, error)
}

// places caches sessions' places.
type places struct {
	store PlaceStore
	mu    sync.Mutex
	m     map[session.ID]Place
}

// load caches the places of evs' sessions in one round trip.
func (p *places) load(ctx context.Context, evs []session.Event) error {
	var ids []session.ID
	seen := map[session.ID]bool{}
	p.mu.Lock()
	for _, e := range evs {
		if _, ok := p.m[e.SessionID]; !ok && !seen[e.SessionID] {
			seen[e.SessionID] = true
			ids = append(ids, e.SessionID)
		}
	}
	p.mu.Unlock()
	if len(ids) == 0 {
		return nil
	}
	sessions, err := p.store.Sessions(ctx, ids)
	if err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.m == nil || len(p.m)+len(sessions) > 10000 {
		p.m = map[session.ID]Place{}
	}
	for id, s := range sessions {
		p.m[id] = Place{Channel: s.Key.Channel, ThreadTS: s.Key.ThreadTS}
	}
	return nil
}

func (p *places) of(ctx context.Context, id session.ID) (Place, error) {
	p.mu.Lock()
	pl, ok := p.m[id]
	p.mu.Unlock()
	if ok {
		return pl, nil
	}
	s, err := p.store.Session(ctx, id)
	if err != nil {
		return Place{}, err
	}
	pl = Place{Channel: s.Key.Channel, ThreadTS: s.Key.ThreadTS}
	p.mu.Lock()
	if p.m == nil || len(p.m) > 10000 {
		p.m = map[session.ID]Place{}
	}
	p.m[id] = pl
	p.mu.Unlock()
	return pl, nil
}

// LineStream writes the audit stream's JSON lines to w (a file opened for appending, or
// stdout): one write per batch of events.
type LineStream struct {
	name   string
	w      io.Writer
	places places
	buf    []byte
}

// NewLineStream returns the audit stream to w, its cursor named name.
func NewLineStream(name string, w io.Writer, store PlaceStore) *LineStream {
	return &LineStream{name: name, w: w, places: places{store: store}}
}

// Name is the stream's cursor's name.
func (s *LineStream) Name() string { return s.name }

// Deliver writes evs' lines; a failed write takes none (the tailer offers them again: a line
// may then be written twice, with the same session id and seq).
func (s *LineStream) Deliver(ctx context.Context, evs []session.Event) (int, error) {
	if err := s.places.load(ctx, evs); err != nil {
		return 0, err
	}
	s.buf = s.buf[:0]
	for _, e := range evs {
		pl, err := s.places.of(ctx, e.SessionID)
		if err != nil {
			return 0, err
		}
		s.buf = EventLine(s.buf, e, pl)
	}
	if _, err := s.w.Write(s.buf); err != nil {
		return 0, fmt.Errorf("audit stream %s: %w", s.name, err)
	}
	return len(evs), nil
}

// OTLPStream sends the audit stream as OTLP logs over HTTP (protobuf) to an OTLP receiver's
// /v1/logs: one log record per event, its body the export's JSON line, its attributes the
// chain position (logbook.session_id, logbook.seq, logbook.prev_hash, logbook.hash,
// logbook.position) and the event's type, its time the event's.
type OTLPStream struct {
	name    string
	url     string
	headers map[string]string
	client  *http.Client
	places  places
	service string
}

// NewOTLPStream returns the audit stream to url (e.g. http://collector:4318/v1/logs) with the
// extra headers (OTEL_EXPORTER_OTLP_HEADERS).
func NewOTLPStream(name, url string, headers map[string]string, store PlaceStore) *OTLPStream {
	// No redirects: a redirect would carry the headers (the collector's API key) and the
	// batch of events to wherever the first answer points.
	client := &http.Client{Timeout: 10 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	return &OTLPStream{name: name, url: url, headers: headers, client: client, places: places{store: store}, service: "logbook"}
}

// Name is the stream's cursor's name.
func (s *OTLPStream) Name() string { return s.name }

// Deliver sends evs in one export request: all or none.
func (s *OTLPStream) Deliver(ctx context.Context, evs []session.Event) (int, error) {
	if err := s.places.load(ctx, evs); err != nil {
		return 0, err
	}
	recs := make([]*logspb.LogRecord, 0, len(evs))
	for _, e := range evs {
		pl, err := s.places.of(ctx, e.SessionID)
		if err != nil {
			return 0, err
		}
		line := EventLine(nil, e, pl)
		recs = append(recs, &logspb.LogRecord{
			TimeUnixNano:         uint64(e.CreatedAt.UnixNano()),
			ObservedTimeUnixNano: uint64(time.Now().UnixNano()),
			SeverityNumber:       logspb.SeverityNumber_SEVERITY_NUMBER_INFO,
			SeverityText:         "INFO",
			EventName:            "logbook." + string(e.Type),
			Body:                 &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: string(bytes.TrimSuffix(line, []byte("\n")))}},
			Attributes: []*commonpb.KeyValue{
				str("logbook.session_id", e.SessionID.String()),
				{Key: "logbook.seq", Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_IntValue{IntValue: e.Seq}}},
				{Key: "logbook.position", Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_IntValue{IntValue: e.Position}}},
				str("logbook.event_type", string(e.Type)),
				str("logbook.event_id", e.ID.String()),
				str("logbook.prev_hash", hex.EncodeToString(e.PrevHash)),
				str("logbook.hash", hex.EncodeToString(e.Hash)),
				str("logbook.channel_id", pl.Channel),
			},
		})
	}
	req := &collogspb.ExportLogsServiceRequest{ResourceLogs: []*logspb.ResourceLogs{{
		Resource:  &resourcepb.Resource{Attributes: []*commonpb.KeyValue{str("service.name", s.service)}},
		ScopeLogs: []*logspb.ScopeLogs{{Scope: &commonpb.InstrumentationScope{Name: "logbook/audit"}, LogRecords: recs}},
	}}}
	body, err := proto.Marshal(req)
	if err != nil {
		return 0, err
	}
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, s.url, bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	hreq.Header.Set("Content-Type", "application/x-protobuf")
	for k, v := range s.headers {
		hreq.Header.Set(k, v)
	}
	resp, err := s.client.Do(hreq)
	if err != nil {
		return 0, fmt.Errorf("audit stream %s: %w", s.name, err)
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return 0, fmt.Errorf("audit stream %s: the OTLP receiver answered %d", s.name, resp.StatusCode)
	}
	return len(evs), nil
}

func str(k, v string) *commonpb.KeyValue {
	return &commonpb.KeyValue{Key: k, Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: v}}}
}
