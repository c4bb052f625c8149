package bot

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/logbook/logbook/session"
)

// Metrics are the bot's Prometheus metrics, registered on a registry passed in.
type Metrics struct {
	envelopes       prometheus.Counter
	acks            prometheus.Counter
	appends         prometheus.Counter
	duplicates      prometheus.Counter
	persistFailures prometheus.Counter
	deferred        prometheus.Counter
	ignored         *prometheus.CounterVec
	turns           *prometheus.CounterVec
	cellsActive     prometheus.Gauge
	evictions       prometheus.Counter
	rehydrations    prometheus.Counter
	leaseSteals     prometheus.Counter
	deliveryRetries prometheus.Counter
	deliveries      prometheus.Counter
	replyCapWaits   prometheus.Counter
	stops           prometheus.Counter
	approvals       *prometheus.CounterVec
	catchUps        prometheus.Counter
	caughtUp        prometheus.Counter
	claimsLost      prometheus.Counter
	leaseAcquires   *prometheus.CounterVec
	wakesDeferred   prometheus.Counter
	peerWakes       *prometheus.CounterVec
}

// NewMetrics creates the bot's metrics and registers them on reg (nil: not registered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	c := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Namespace: "logbook", Name: name, Help: help})
	}
	m := &Metrics{
		envelopes:       c("envelopes_total", "Socket Mode envelopes received (events_api and slash_commands)."),
		acks:            c("acks_total", "Envelopes acked."),
		appends:         c("gateway_appends_total", "Events appended by the gateway (including duplicates returned)."),
		duplicates:      c("duplicate_deliveries_total", "Deliveries of a message already stored (retries, app_mention + message)."),
		persistFailures: c("persist_failures_total", "Envelopes left unacked because the log could not be written."),
		deferred: c("envelopes_deferred_total",
			"Envelopes left unacked because the gateway's backlog was full (the socket keeps being read; Slack redelivers them)."),
		ignored: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "logbook", Name: "ignored_events_total",
			Help: "Events acked and not stored, by reason (no content is kept)."}, []string{"reason"}),
		turns: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "logbook", Name: "turns_total",
			Help: "Turns completed, by status."}, []string{"status"}),
		cellsActive: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "logbook", Name: "cells_active",
			Help: "Cells running in this process."}),
		evictions:       c("cell_evictions_total", "Cells that exited (idle, shutdown, lease lost)."),
		rehydrations:    c("cell_rehydrations_total", "Cells woken from the log."),
		leaseSteals:     c("lease_steals_total", "Leases taken over after another owner's expired."),
		deliveryRetries: c("delivery_retries_total", "Slack posts retried (rate limits, ambiguous failures)."),
		deliveries:      c("deliveries_total", "Replies delivered to Slack."),
		replyCapWaits:   c("reply_cap_waits_total", "Turns that waited because their thread reached its reply cap (a guard against bot-to-bot loops)."),
		stops:           c("turn_stops_total", "Turns a person stopped (the stop button, a \"stop\" message)."),
		approvals: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "logbook", Name: "approvals_total",
			Help: "Approval cards posted (requested) and decisions recorded (approved, denied, timeout, canceled), and clicks refused (not_permitted, stale)."}, []string{"event"}),
		catchUps: c("catch_ups_total", "Catch-ups from Slack tried after a gap (a failed append, a reconnected socket); tried again until one succeeds."),
		caughtUp: c("caught_up_messages_total", "Messages the log lacked that a catch-up from Slack appended."),
		claimsLost: c("liveness_claims_lost_total",
			"Times the replica could no longer prove its liveness claim (its LISTEN connection failed or did not answer its check): the turns run under it were cancelled."),
		leaseAcquires: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "logbook", Name: "lease_acquire_total",
			Help: "Tries to take a session's lease (one per cell started), by result: taken, held (another owner holds it), error."},
			[]string{"result"}),
		wakesDeferred: c("wakes_deferred_total",
			"Polls (and the start) that found no room under LOGBOOK_WAKE_LIMIT, or filled it: sessions with pending work may wait for the cells working through a backlog to go idle."),
		peerWakes: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "logbook", Name: "peer_wakes_total",
			Help: "Signals routed to a replica that takes wakes over HTTP (LOGBOOK_PEER_ADDR), by how they went: posted, or notified (the post failed; a NOTIFY went instead)."},
			[]string{"how"}),
	}
	if reg != nil {
		reg.MustRegister(m.envelopes, m.acks, m.appends, m.duplicates, m.persistFailures, m.deferred, m.ignored, m.turns,
			m.cellsActive, m.evictions, m.rehydrations, m.leaseSteals, m.deliveryRetries, m.deliveries, m.replyCapWaits,
			m.stops, m.approvals, m.catchUps, m.caughtUp, m.claimsLost, m.leaseAcquires, m.wakesDeferred, m.peerWakes)
	}
	return m
}

// StandbyMetrics are a streaming standby's metrics (logbook_standby_*) and log lines; it is
// the session.StandbyObserver of serve's standby.
type StandbyMetrics struct {
	lagBytes   prometheus.Gauge
	lagSeconds prometheus.Gauge
	paused     prometheus.Gauge
	up         prometheus.Gauge
	reads      *prometheus.CounterVec
	log        zerolog.Logger
}

// NewStandbyMetrics creates the standby's metrics and registers them on reg (nil: not
// registered); log gets a line when the standby stops answering and when it answers again.
func NewStandbyMetrics(reg prometheus.Registerer, log zerolog.Logger) *StandbyMetrics {
	g := func(name, help string) prometheus.Gauge {
		return prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "logbook", Name: name, Help: help})
	}
	m := &StandbyMetrics{
		lagBytes: g("standby_lag_bytes", "Bytes of WAL the standby (LOGBOOK_READ_DATABASE_URL) has not replayed yet: the primary's flushed position minus the standby's replayed one, at the last measurement."),
		lagSeconds: g("standby_lag_seconds",
			"Age of the newest transaction the standby replayed, while it is behind (0 when caught up), at the last measurement."),
		paused: g("standby_replay_paused", "1 while the standby's replay is paused (pg_wal_replay_pause())."),
		up:     g("standby_up", "1 while the standby answers, 0 while reads go to the primary because it does not."),
		reads: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "logbook", Name: "standby_reads_total",
			Help: "Reads of search, transcripts, the web pages and audit, by the server that served them (standby, primary) and why the primary did (lagging: the standby had not replayed the newest writes within LOGBOOK_READ_MAX_WAIT; unreachable)."},
			[]string{"server", "reason"}),
		log: log,
	}
	m.up.Set(1)
	if reg != nil {
		reg.MustRegister(m.lagBytes, m.lagSeconds, m.paused, m.up, m.reads)
	}
	return m
}

// Read counts a read by the server that served it.
func (m *StandbyMetrics) Read(server, reason string) { m.reads.WithLabelValues(server, reason).Inc() }

// Lag sets the lag gauges.
func (m *StandbyMetrics) Lag(l session.Lag) {
	m.lagBytes.Set(float64(l.Bytes))
	m.lagSeconds.Set(l.Seconds)
	paused := 0.0
	if l.Paused {
		paused = 1
	}
	m.paused.Set(paused)
}

// Unreachable logs that the standby stopped answering.
func (m *StandbyMetrics) Unreachable(err error) {
	m.up.Set(0)
	m.log.Warn().Err(err).Msg("the standby (LOGBOOK_READ_DATABASE_URL) does not answer: reads go to the primary")
}

// Reachable logs that the standby answers again.
func (m *StandbyMetrics) Reachable() {
	m.up.Set(1)
	m.log.Info().Msg("the standby (LOGBOOK_READ_DATABASE_URL) answers again: reads go to it")
}
