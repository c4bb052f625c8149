package bot

import "github.com/prometheus/client_golang/prometheus"

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
	wakesDeferred   prometheus.Counter
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
		wakesDeferred: c("wakes_deferred_total",
			"Polls (and the start) that found no room under LOGBOOK_WAKE_LIMIT, or filled it: sessions with pending work may wait for the cells working through a backlog to go idle."),
	}
	if reg != nil {
		reg.MustRegister(m.envelopes, m.acks, m.appends, m.duplicates, m.persistFailures, m.deferred, m.ignored, m.turns,
			m.cellsActive, m.evictions, m.rehydrations, m.leaseSteals, m.deliveryRetries, m.deliveries, m.replyCapWaits,
			m.stops, m.approvals, m.catchUps, m.caughtUp, m.claimsLost, m.wakesDeferred)
	}
	return m
}
