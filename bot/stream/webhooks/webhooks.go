// Package webhooks delivers the log's events people act on to outbound webhooks (issue 51),
// signed per the Standard Webhooks specification (https://www.standardwebhooks.com).
//
// The webhooks are LOGBOOK_WEBHOOKS: a JSON object (or the path of a file holding one) of
// sinks by name, each {"url": "https://…", "secret": "whsec_…", "events": ["turn.failed"],
// "content": false}; ${NAME} in a secret is taken from logbook's environment. No events: every
// type. The url is https, or http to a loopback or private address (a receiver beside
// logbook). A sink is a stream.Sink: the tailer hands it the log in commit order from its own
// cursor (stream_cursors "webhook:<name>"), under one replica's lease, at least once.
//
// A delivery is POST url with the body {"type", "timestamp", "data"} and the headers
// webhook-id (the event's session id and seq: stable across retries and replicas),
// webhook-timestamp (Unix seconds of the attempt) and webhook-signature ("v1," + base64 of
// HMAC-SHA256 over "id.timestamp.body" with the base64-decoded key after "whsec_"). A 2xx
// answer delivers it; anything else (or no answer within Timeout; a redirect is not followed)
// is retried, in order, by the tailer's backoff. Once a sink has failed without a success for
// longer than Options.MaxAge, each event it cannot take at its first attempt is a dead letter
// (stream_dead_letters, by session id and seq) and the sink moves on; `logbook webhooks
// failed` lists them and `logbook webhooks redeliver` sends them again.
//
// The data carries ids and links: the session, channel, thread, seq, actor, the transcript's
// link (LOGBOOK_PUBLIC_URL), and per type the fields that are ids, states and numbers (never
// a message's, a summary's or a setting's text). "content": true adds the event's payload.
package webhooks

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/logbook/logbook/bot"
	"github.com/logbook/logbook/bot/hooks"
	"github.com/logbook/logbook/bot/stream"
	"github.com/logbook/logbook/session"
	"github.com/logbook/logbook/session/thread"
)

// Webhook is one configured sink.
type Webhook struct {
	Name    string   `json:"-"`
	URL     string   `json:"url"`
	Secret  string   `json:"secret"`
	Events  []string `json:"events"`
	Content bool     `json:"content"`

	key []byte // the secret's key, decoded
}

// String, GoString and MarshalJSON show a webhook without its secret.
func (w Webhook) String() string   { return "webhook " + w.Name + " (" + w.URL + ")" }
func (w Webhook) GoString() string { return w.String() }
func (w Webhook) MarshalJSON() ([]byte, error) {
	return json.Marshal(map[string]any{"name": w.Name, "url": w.URL, "secret": "[redacted]", "events": w.Events, "content": w.Content})
}

// Wants says whether the webhook takes events of type typ.
func (w Webhook) Wants(typ string) bool { return len(w.Events) == 0 || slices.Contains(w.Events, typ) }

// SinkName is the name of w's cursor and lease in stream_cursors.
func (w Webhook) SinkName() string { return "webhook:" + w.Name }

// SecretPrefix starts a Standard Webhooks secret.
const SecretPrefix = "whsec_"

// minKey is the shortest key a secret may hold, in bytes (the specification asks 24 to 64).
const minKey = 24

// Parse reads LOGBOOK_WEBHOOKS: a JSON object, or (not starting with "{") the path of a file
// holding one. Errors name the webhook and what is wrong, never a secret.
func Parse(value string, getenv func(string) string) (map[string]Webhook, error) {
	return hooks.ParseNamed(value, "webhook", "url, secret, events, content", getenv, func(name string, w *Webhook) (*string, func() error) {
		w.Name = name
		return &w.Secret, func() error {
			key, err := DecodeSecret(w.Secret)
			if err != nil {
				return err
			}
			w.key = key
			if err := checkURL(w.URL); err != nil {
				return err
			}
			for _, e := range w.Events {
				if !slices.Contains(Types, e) {
					return fmt.Errorf("unknown event type %q (known: %s)", e, strings.Join(Types, ", "))
				}
			}
			return nil
		}
	})
}

// DecodeSecret returns the key of a Standard Webhooks secret: "whsec_" + base64 of at least
// 24 bytes.
func DecodeSecret(secret string) ([]byte, error) {
	b64, ok := strings.CutPrefix(secret, SecretPrefix)
	if !ok {
		return nil, fmt.Errorf("the secret must be %q + base64 of the key (e.g. whsec_$(openssl rand -base64 32))", SecretPrefix)
	}
	key, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		return nil, errors.New("the secret after whsec_ is not standard base64")
	}
	if len(key) < minKey {
		return nil, fmt.Errorf("the secret's key must be at least %d bytes (openssl rand -base64 32)", minKey)
	}
	return key, nil
}

// checkURL accepts https, and http only to a loopback or private address (an IP, or
// localhost): a receiver beside logbook.
func checkURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return fmt.Errorf("url %q is not an absolute URL", raw)
	}
	if u.User != nil {
		return errors.New("the url must not hold credentials; the signature authenticates logbook")
	}
	switch u.Scheme {
	case "https":
		return nil
	case "http":
		h := u.Hostname()
		if h == "localhost" {
			return nil
		}
		if ip := net.ParseIP(h); ip != nil && (ip.IsLoopback() || ip.IsPrivate()) {
			return nil
		}
		return fmt.Errorf("url %q: http only to a loopback or private address; use https", raw)
	default:
		return fmt.Errorf("url %q: the scheme must be https (or http to a loopback or private address)", raw)
	}
}

// Webhook event types.
const (
	SessionStarted    = "session.started"
	TurnCompleted     = "turn.completed"
	TurnFailed        = "turn.failed"
	ApprovalRequested = "approval.requested"
	ApprovalDecided   = "approval.decided"
	SessionStopped    = "session.stopped"
	PullRequestOpened = "pull_request.opened"
	BudgetNotice      = "budget.notice"
	AutomationPaused  = "automation.paused"
	AutomationResumed = "automation.resumed"
	// The channel ledger's other changes are "channel." + the ledger's event type.
	ChannelSettingChanged     = "channel.setting_changed"
	ChannelNoteAdded          = "channel.note_added"
	ChannelNoteForgotten      = "channel.note_forgotten"
	ChannelRepoSet            = "channel.repo_set"
	ChannelBudgetRaised       = "channel.budget_raised"
	ChannelScheduleAdded      = "channel.schedule_added"
	ChannelScheduleRemoved    = "channel.schedule_removed"
	ChannelConnectorConnected = "channel.connector_connected"
)

// Types are every webhook event type, in the order the docs list them.
var Types = []string{SessionStarted, TurnCompleted, TurnFailed, ApprovalRequested, ApprovalDecided,
	SessionStopped, PullRequestOpened, BudgetNotice, AutomationPaused, AutomationResumed,
	ChannelSettingChanged, ChannelNoteAdded, ChannelNoteForgotten, ChannelRepoSet, ChannelBudgetRaised,
	ChannelScheduleAdded, ChannelScheduleRemoved, ChannelConnectorConnected}

// byLogType maps the log's event types to webhook types (turn_completed is decided by status,
// a session's first event is session.started).
var byLogType = map[session.Type]string{
	session.TypeApprovalRequested:  ApprovalRequested,
	session.TypeApprovalDecided:    ApprovalDecided,
	session.TypeTurnStopped:        SessionStopped,
	session.TypePullRequest:        PullRequestOpened,
	session.TypeBudgetNotice:       BudgetNotice,
	session.TypeAutomationPaused:   AutomationPaused,
	session.TypeAutomationResumed:  AutomationResumed,
	session.TypeSettingChanged:     ChannelSettingChanged,
	session.TypeNoteAdded:          ChannelNoteAdded,
	session.TypeNoteForgotten:      ChannelNoteForgotten,
	session.TypeRepoSet:            ChannelRepoSet,
	session.TypeBudgetRaised:       ChannelBudgetRaised,
	session.TypeScheduleAdded:      ChannelScheduleAdded,
	session.TypeScheduleRemoved:    ChannelScheduleRemoved,
	session.TypeConnectorConnected: ChannelConnectorConnected,
}

// TypeOf is the webhook type of e, and false for an event no webhook carries. A thread's first
// event (seq 1) is session.started; turn_completed is turn.failed when its status is error,
// else turn.completed (with its status).
func TypeOf(e session.Event) (string, bool) {
	if t, ok := byLogType[e.Type]; ok {
		return t, true
	}
	switch {
	case e.Type == session.TypeTurnCompleted:
		if thread.CompletedAs(e).Status == session.StatusError {
			return TurnFailed, true
		}
		return TurnCompleted, true
	case e.Seq == 1:
		return SessionStarted, true
	}
	return "", false
}

// idFields are the payload fields of each log type that a webhook without content carries:
// ids, states, numbers and links, never free text.
var idFields = map[session.Type][]string{
	session.TypeTurnCompleted:      {"turn", "status", "reason", "through", "trace_id"},
	session.TypeTurnStopped:        {"turn", "by", "source", "request"},
	session.TypeApprovalRequested:  {"turn", "call_id", "tool", "expires_at"},
	session.TypeApprovalDecided:    {"call_id", "decision", "via"},
	session.TypePullRequest:        {"call_id", "repo", "branch", "base", "number", "url"},
	session.TypeBudgetNotice:       {"scope", "subject", "day", "spent_micros", "limit_micros"},
	session.TypeAutomationPaused:   {"id", "kind", "name", "by", "via", "at"},
	session.TypeAutomationResumed:  {"id", "kind", "name", "by", "via", "at"},
	session.TypeSettingChanged:     {"id", "name", "by", "via", "at"},
	session.TypeNoteAdded:          {"id", "by_kind", "by", "session", "thread_ts", "via", "at"},
	session.TypeNoteForgotten:      {"note", "by", "via", "at"},
	session.TypeRepoSet:            {"id", "url", "branch", "by", "via", "at"},
	session.TypeBudgetRaised:       {"id", "day", "scope", "subject", "amount", "by", "via", "at"},
	session.TypeScheduleAdded:      {"id", "spec", "by", "via", "at"},
	session.TypeScheduleRemoved:    {"schedule", "by", "via", "at"},
	session.TypeConnectorConnected: {"server", "by", "via", "at"},
}

// Place is where an event's session is: its channel and thread.
type Place struct {
	Channel  string
	ThreadTS string
}

// Body is the JSON body of the delivery of e (of webhook type typ) from the session at place.
// publicURL, when set, links the transcript.
func Body(w Webhook, typ string, e session.Event, place Place, publicURL string) ([]byte, error) {
	data := map[string]any{
		"id":         stream.ID(e),
		"session_id": e.SessionID.String(),
		"seq":        e.Seq,
		"event_id":   e.ID.String(),
		"event_type": string(e.Type),
		"channel_id": place.Channel,
		"thread_ts":  place.ThreadTS,
		"actor":      map[string]string{"kind": string(e.Actor.Kind), "id": e.Actor.ID},
		"position":   e.Position,
		"hash":       fmt.Sprintf("%x", e.Hash),
	}
	if publicURL != "" {
		data["link"] = bot.TranscriptURL(publicURL, e.SessionID)
	}
	if fields := idFields[e.Type]; len(fields) > 0 && e.Payload != nil {
		var p map[string]json.RawMessage
		if json.Unmarshal(e.Payload, &p) == nil {
			for _, f := range fields {
				if v, ok := p[f]; ok {
					data[f] = v
				}
			}
		}
	}
	if w.Content {
		if e.Payload == nil {
			data["payload"] = nil
			data["purged"] = true
		} else {
			data["payload"] = e.Payload
		}
	}
	return json.Marshal(map[string]any{
		"type":      typ,
		"timestamp": e.CreatedAt.UTC().Format(time.RFC3339Nano),
		"data":      data,
	})
}

// Sign is the webhook-signature header of body sent with id at timestamp (Unix seconds): "v1,"
// + base64 of HMAC-SHA256 over "id.timestamp.body" with key.
func Sign(key []byte, id string, timestamp int64, body []byte) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(id + "." + strconv.FormatInt(timestamp, 10) + "."))
	m.Write(body)
	return "v1," + base64.StdEncoding.EncodeToString(m.Sum(nil))
}

// Verify is a receiver's check of a delivery, per the specification: one of header's
// space-separated signatures is body's with the secret (whsec_…), and the timestamp is within
// tolerance of now. It is what the tests' receivers and docs/streams.md's snippet do.
func Verify(secret, id, timestamp, header string, body []byte, now time.Time, tolerance time.Duration) error {
	key, err := DecodeSecret(secret)
	if err != nil {
		return err
	}
	ts, err := strconv.ParseInt(timestamp, 10, 64)
	if err != nil {
		return errors.New("webhook-timestamp is not Unix seconds")
	}
	if d := now.Sub(time.Unix(ts, 0)); d > tolerance || d < -tolerance {
		return errors.New("webhook-timestamp is too far from now")
	}
	want := Sign(key, id, ts, body)
	for _, sig := range strings.Fields(header) {
		if hmac.Equal([]byte(sig), []byte(want)) {
			return nil
		}
	}
	return errors.New("no webhook-signature matches")
}

// Store is what a sink reads and records (*session.Store).
type Store interface {
	Session(ctx context.Context, id session.ID) (session.Session, error)
	Sessions(ctx context.Context, ids []session.ID) (map[session.ID]session.Session, error)
	RecordDeadLetter(ctx context.Context, d session.DeadLetter) (session.DeadLetter, error)
}

// Options configure the webhooks' delivery. Zero values take defaults.
type Options struct {
	// MaxAge is how long a webhook may fail without a success before what it cannot take at
	// the first attempt becomes a dead letter (LOGBOOK_WEBHOOK_MAX_AGE, default 1h).
	MaxAge time.Duration
	// Timeout bounds one attempt (default 10s).
	Timeout   time.Duration
	PublicURL string           // LOGBOOK_PUBLIC_URL: links to transcripts
	Client    *http.Client     // default: one that follows no redirect
	Now       func() time.Time // default time.Now
	Log       zerolog.Logger
}

func (o *Options) defaults() {
	if o.MaxAge <= 0 {
		o.MaxAge = time.Hour
	}
	if o.Timeout <= 0 {
		o.Timeout = 10 * time.Second
	}
	if o.Client == nil {
		o.Client = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	}
	if o.Now == nil {
		o.Now = time.Now
	}
}

// Sink delivers to one webhook; it is a stream.Sink.
type Sink struct {
	w     Webhook
	store Store
	o     Options

	mu           sync.Mutex
	places       map[session.ID]Place
	failingSince time.Time // first failure since the last success; zero: not failing
	attempts     map[string]int
}

// NewSinks returns a sink per webhook, by name.
func NewSinks(ws map[string]Webhook, store Store, o Options) []*Sink {
	o.defaults()
	names := make([]string, 0, len(ws))
	for n := range ws {
		names = append(names, n)
	}
	sort.Strings(names)
	out := make([]*Sink, 0, len(ws))
	for _, n := range names {
		out = append(out, &Sink{w: ws[n], store: store, o: o, places: map[session.ID]Place{}, attempts: map[string]int{}})
	}
	return out
}

// Name is the sink's cursor's name: "webhook:<name>".
func (s *Sink) Name() string { return s.w.SinkName() }

// Deliver posts each event of evs the webhook takes, in order; see the package doc for
// retries and dead letters.
func (s *Sink) Deliver(ctx context.Context, evs []session.Event) (int, error) {
	if err := s.placeAll(ctx, evs); err != nil {
		return 0, err
	}
	for i, e := range evs {
		typ, ok := TypeOf(e)
		if !ok || !s.w.Wants(typ) {
			continue
		}
		place, err := s.place(ctx, e.SessionID)
		if err != nil {
			return i, err
		}
		body, err := Body(s.w, typ, e, place, s.o.PublicURL)
		if err != nil {
			return i, fmt.Errorf("webhook %s: body of %s: %w", s.w.Name, stream.ID(e), err)
		}
		id := stream.ID(e)
		now := s.o.Now()
		err = Post(ctx, s.o.Client, s.w, id, body, now, s.o.Timeout)
		s.mu.Lock()
		if err == nil {
			s.failingSince = time.Time{}
			delete(s.attempts, id)
			s.mu.Unlock()
			continue
		}
		if s.failingSince.IsZero() {
			s.failingSince = now
		}
		s.attempts[id]++
		attempts := s.attempts[id]
		dead := now.Sub(s.failingSince) >= s.o.MaxAge
		s.mu.Unlock()
		if ctx.Err() != nil {
			return i, ctx.Err()
		}
		if !dead {
			return i, fmt.Errorf("webhook %s: deliver %s: %w", s.w.Name, id, err)
		}
		if _, rerr := s.store.RecordDeadLetter(ctx, session.DeadLetter{Sink: s.w.Name, Session: e.SessionID, Seq: e.Seq,
			EventType: e.Type, WebhookType: typ, Attempts: attempts, LastError: err.Error()}); rerr != nil {
			return i, rerr
		}
		s.mu.Lock()
		delete(s.attempts, id)
		s.mu.Unlock()
		s.o.Log.Warn().Str("webhook", s.w.Name).Str("webhook_id", id).Str("type", typ).Int("attempts", attempts).
			Err(err).Msg("webhook: failing for longer than its max age; the event is a dead letter (logbook webhooks failed)")
	}
	return len(evs), nil
}

// placeAll caches the places of the sessions of evs that the webhook takes, in one round trip
// (a batch of new threads would otherwise cost a query each).
func (s *Sink) placeAll(ctx context.Context, evs []session.Event) error {
	var ids []session.ID
	seen := map[session.ID]bool{}
	s.mu.Lock()
	for _, e := range evs {
		typ, ok := TypeOf(e)
		if !ok || !s.w.Wants(typ) || seen[e.SessionID] {
			continue
		}
		seen[e.SessionID] = true
		if _, ok := s.places[e.SessionID]; !ok {
			ids = append(ids, e.SessionID)
		}
	}
	s.mu.Unlock()
	if len(ids) == 0 {
		return nil
	}
	sessions, err := s.store.Sessions(ctx, ids)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.places)+len(sessions) > 10000 {
		clear(s.places)
	}
	for id, sess := range sessions {
		s.places[id] = Place{Channel: sess.Key.Channel, ThreadTS: sess.Key.ThreadTS}
	}
	return nil
}

// place is the channel and thread of session id, cached.
func (s *Sink) place(ctx context.Context, id session.ID) (Place, error) {
	s.mu.Lock()
	p, ok := s.places[id]
	s.mu.Unlock()
	if ok {
		return p, nil
	}
	sess, err := s.store.Session(ctx, id)
	if err != nil {
		return Place{}, err
	}
	p = Place{Channel: sess.Key.Channel, ThreadTS: sess.Key.ThreadTS}
	s.mu.Lock()
	if len(s.places) > 10000 {
		clear(s.places)
	}
	s.places[id] = p
	s.mu.Unlock()
	return p, nil
}

// Post sends one signed delivery of body with id at now: nil on a 2xx answer. The error says
// the status (never the answer's body: the receiver's text is not logbook's to keep).
func Post(ctx context.Context, client *http.Client, w Webhook, id string, body []byte, now time.Time, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.URL, bytes.NewReader(body))
	if err != nil {
		return err
	}
	ts := now.Unix()
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "logbook-webhooks")
	req.Header.Set("webhook-id", id)
	req.Header.Set("webhook-timestamp", strconv.FormatInt(ts, 10))
	req.Header.Set("webhook-signature", Sign(w.key, id, ts, body))
	resp, err := client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // the URL is in the config; the cause is what matters
		}
		return fmt.Errorf("POST: %w", err)
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("POST: the receiver answered %d", resp.StatusCode)
	}
	return nil
}

// SinkNames are the sinks' names (for the tailer and serve's log line).
func SinkNames(ss []*Sink) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = s.Name()
	}
	return out
}
