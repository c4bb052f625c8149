package slackemu

import (
	"encoding/json"
	"time"

	"github.com/google/uuid"
)

type deliveryState int

const (
	awaitingAck deliveryState = iota
	awaitingRetry
	deliveryAcked
	deliveryFailed
)

// delivery is the life of one event (or slash command) across its attempts.
type delivery struct {
	id         string // event_id, or the slash command's id
	kind       string // "events_api" | "slash_commands" | "interactive"
	eventType  string // inner event type, or the command
	payload    json.RawMessage
	retries    bool
	attempt    int
	reason     string
	envelopeID string
	state      deliveryState
	timer      *time.Timer
	slash      *slashState
	// envelopeIDs lists every envelope_id used, to forget them when pruned.
	envelopeIDs []string
}

// Delivery records one envelope the server tried to send.
type Delivery struct {
	EnvelopeID string `json:"envelope_id"`
	// EventID is payload.event_id for events_api, the command's id for slash_commands.
	EventID     string `json:"event_id"`
	Type        string `json:"type"`       // "events_api" or "slash_commands"
	EventType   string `json:"event_type"` // inner event type ("message", "app_mention") or the command
	Attempt     int    `json:"retry_attempt"`
	RetryReason string `json:"retry_reason"`
	// ConnID is the socket it went to; 0 when no socket was open (the attempt failed at once).
	ConnID int `json:"conn_id"`
	// Fault is the injected fault applied: "", "drop", "delay" or "duplicate".
	Fault string    `json:"fault,omitempty"`
	At    time.Time `json:"at"`
}

// Ack is an acknowledgement received from a client.
type Ack struct {
	EnvelopeID string          `json:"envelope_id"`
	EventID    string          `json:"event_id,omitempty"` // "" if the envelope is unknown
	ConnID     int             `json:"conn_id"`
	Payload    json.RawMessage `json:"payload,omitempty"`
	// Stale is true when the ack did not settle a delivery: unknown envelope, an
	// envelope whose ack window had passed, or one already acked.
	Stale bool      `json:"stale"`
	At    time.Time `json:"at"`
}

// FaultKind names what a DeliveryFault does to an envelope.
type FaultKind string

// Delivery fault kinds.
const (
	// FaultDrop loses the envelope on the way: nothing is written, the ack window
	// still runs, so Slack's retry follows.
	FaultDrop FaultKind = "drop"
	// FaultDelay writes the envelope after Delay; the ack window starts when it is
	// sent, so a Delay beyond the window yields a retry that may overtake it.
	FaultDelay FaultKind = "delay"
	// FaultDuplicate writes the same frame (same envelope_id) twice.
	FaultDuplicate FaultKind = "duplicate"
)

// DeliveryFault alters the next matching envelopes the server sends.
type DeliveryFault struct {
	Kind  FaultKind     `json:"kind"`
	Delay time.Duration `json:"delay"`
	// EventType matches the inner event type ("message", "app_mention") or, for
	// slash commands, the command ("/logbook"); "" matches every envelope.
	EventType string `json:"event_type"`
	// Times is how many envelopes are affected; values < 1 mean 1.
	Times int `json:"times"`
}

func (s *Server) takeDeliveryFaultLocked(d *delivery) *DeliveryFault {
	for i, f := range s.dfaults {
		if f.EventType != "" && f.EventType != d.eventType {
			continue
		}
		f.Times--
		if f.Times < 1 {
			s.dfaults = append(s.dfaults[:i:i], s.dfaults[i+1:]...)
		}
		return f
	}
	return nil
}

// envelopeFrame is the Socket Mode frame for the current attempt of d.
func (d *delivery) envelopeFrame() []byte {
	frame, _ := json.Marshal(struct {
		EnvelopeID             string          `json:"envelope_id"`
		Type                   string          `json:"type"`
		AcceptsResponsePayload bool            `json:"accepts_response_payload"`
		RetryAttempt           int             `json:"retry_attempt"`
		RetryReason            string          `json:"retry_reason"`
		Payload                json.RawMessage `json:"payload"`
	}{d.envelopeID, d.kind, d.kind == "slash_commands" || d.kind == "interactive", d.attempt, d.reason, d.payload})
	return frame
}

// attemptLocked sends the current attempt of d to one open socket (pickConnLocked)
// and starts its ack window. With no socket open the attempt fails at once.
func (s *Server) attemptLocked(d *delivery) {
	d.envelopeID = uuid.NewString()
	s.envelopes[d.envelopeID] = d
	d.envelopeIDs = append(d.envelopeIDs, d.envelopeID)
	rec := Delivery{
		EnvelopeID: d.envelopeID, EventID: d.id, Type: d.kind, EventType: d.eventType,
		Attempt: d.attempt, RetryReason: d.reason, At: time.Now(),
	}
	c := s.pickConnLocked()
	if c == nil {
		s.delivLog = capped(append(s.delivLog, rec), s.opts.RecordLimit)
		s.log.Debug().Str("event_id", d.id).Int("retry_attempt", d.attempt).Msg("no socket open; attempt failed")
		s.failLocked(d)
		s.notifyLocked()
		return
	}
	rec.ConnID = c.id
	frame := d.envelopeFrame()
	f := s.takeDeliveryFaultLocked(d)
	switch {
	case f == nil:
		c.sendLocked(frame)
	case f.Kind == FaultDrop:
		rec.Fault = string(FaultDrop)
	case f.Kind == FaultDelay:
		rec.Fault = string(FaultDelay)
		s.afterFunc(f.Delay, func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			c.sendLocked(frame)
		})
	case f.Kind == FaultDuplicate:
		rec.Fault = string(FaultDuplicate)
		c.sendLocked(frame)
		c.sendLocked(frame)
	default:
		c.sendLocked(frame)
	}
	s.delivLog = capped(append(s.delivLog, rec), s.opts.RecordLimit)
	d.state = awaitingAck
	env := d.envelopeID
	d.timer = s.afterFunc(s.opts.AckTimeout, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if d.state == awaitingAck && d.envelopeID == env {
			s.log.Debug().Str("event_id", d.id).Str("envelope_id", env).Msg("ack window passed")
			s.failLocked(d)
			s.notifyLocked()
		}
	})
	s.notifyLocked()
}

// failLocked handles a failed attempt: schedule the next retry or give up.
func (s *Server) failLocked(d *delivery) {
	if !d.retries || d.attempt >= len(s.opts.RetrySchedule) {
		d.state = deliveryFailed
		if d.slash != nil {
			d.slash.failed = true
		}
		s.settleLocked(d)
		return
	}
	wait := s.opts.RetrySchedule[d.attempt]
	d.attempt++
	d.reason = "timeout"
	d.state = awaitingRetry
	if wait <= 0 {
		s.attemptLocked(d)
		return
	}
	n := d.attempt
	d.timer = s.afterFunc(wait, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if d.state == awaitingRetry && d.attempt == n {
			s.attemptLocked(d)
		}
	})
}

// ackLocked settles the delivery whose current envelope is envelopeID.
func (s *Server) ackLocked(c *conn, envelopeID string, payload json.RawMessage) {
	a := Ack{EnvelopeID: envelopeID, ConnID: c.id, Payload: payload, At: time.Now(), Stale: true}
	d := s.envelopes[envelopeID]
	if d != nil {
		a.EventID = d.id
		if d.envelopeID == envelopeID && d.state == awaitingAck {
			a.Stale = false
			d.state = deliveryAcked
			if d.timer != nil {
				d.timer.Stop()
			}
			s.settleLocked(d)
			if d.slash != nil {
				s.applySlashAckLocked(d, payload)
			}
		}
	}
	s.acks = capped(append(s.acks, a), s.opts.RecordLimit)
	s.notifyLocked()
}

// FireRetries sends every retry that is waiting for its scheduled time now, as if
// the clock had reached it. It returns how many were sent. Use it instead of
// sleeping through the retry schedule.
func (s *Server) FireRetries() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, d := range s.byEvent {
		if d.state != awaitingRetry {
			continue
		}
		if d.timer != nil {
			d.timer.Stop()
		}
		s.attemptLocked(d)
		n++
	}
	return n
}

// ExpireAcks ends now the ack window of each of eventIDs' deliveries that still awaits an
// ack, as if Options.AckTimeout had passed: a retry is scheduled, or the delivery fails. It
// returns how many it ended. Use it, with a long AckTimeout, when a test needs a dropped
// envelope to count as failed: a short AckTimeout also fails envelopes that a loaded
// machine acks late.
func (s *Server) ExpireAcks(eventIDs ...string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, id := range eventIDs {
		d := s.byEvent[id]
		if d == nil || d.state != awaitingAck {
			continue
		}
		if d.timer != nil {
			d.timer.Stop()
		}
		s.failLocked(d)
		n++
	}
	if n > 0 {
		s.notifyLocked()
	}
	return n
}

// settleLocked remembers that d is acked or failed and forgets the oldest
// settled deliveries beyond Options.RecordLimit.
func (s *Server) settleLocked(d *delivery) {
	s.settled = append(s.settled, d.id)
	if len(s.settled) <= s.opts.RecordLimit {
		return
	}
	old := s.settled[0]
	s.settled = capped(s.settled[1:], s.opts.RecordLimit)
	if od := s.byEvent[old]; od != nil {
		for _, env := range od.envelopeIDs {
			delete(s.envelopes, env)
		}
		delete(s.byEvent, old)
	}
}

// capped keeps the newest limit records of xs; it copies only when xs has grown
// a quarter past the limit, so appends stay amortised O(1).
func capped[T any](xs []T, limit int) []T {
	if len(xs) <= limit+limit/4 {
		return xs
	}
	return append(xs[:0:0], xs[len(xs)-limit:]...)
}
