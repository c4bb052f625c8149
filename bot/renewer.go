package bot

import (
	"context"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/logbook/logbook/session"
)

// renewer keeps this replica's leases: one statement per interval renews the leases its
// cells hold, up to session.MaxLeasesPerRenewal of them, and one more statement for each
// batch beyond (#33: one renewal per cell, each waiting for a connection of a pool busy with
// turns, timed out under load and moved sessions between live replicas; #53: all of 12,300
// leases in one transaction filled the server's lock table, and every renewal failed). A
// cell whose lease is gone, or may have expired on the cell's own clock, is cancelled with
// errLeaseLost; a renewed cell's fence moves on. A batch that fails (out of shared memory,
// a timeout) loses only the leases that may have expired; the others are retried.
type renewer struct {
	store *session.Store
	clock Clock
	ttl   time.Duration
	log   zerolog.Logger
	// batch is the most leases renewed in one transaction (session.MaxLeasesPerRenewal;
	// tests make it smaller).
	batch int

	mu   sync.Mutex
	held map[*leaseHold]struct{}
}

// leaseHold is one cell's lease as the renewer keeps it. validUntil is the cell's own
// deadline: measured from before the call that last took or renewed the lease. Only the
// renewer's goroutine changes lease and validUntil once the hold is kept.
type leaseHold struct {
	lease      session.Lease
	validUntil time.Time
	fence      *leaseFence
	cancel     context.CancelCauseFunc
	log        zerolog.Logger
}

func newRenewer(store *session.Store, clock Clock, ttl time.Duration, log zerolog.Logger) *renewer {
	return &renewer{store: store, clock: clock, ttl: ttl, log: log, batch: session.MaxLeasesPerRenewal, held: map[*leaseHold]struct{}{}}
}

// keep renews h's lease from now on, until drop.
func (r *renewer) keep(h *leaseHold) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.held[h] = struct{}{}
}

// drop stops renewing h's lease (the cell is leaving, or its lease is lost).
func (r *renewer) drop(h *leaseHold) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.held, h)
}

// run renews every quarter of the TTL until ctx ends. It must run until every cell has left.
func (r *renewer) run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.clock.After(r.ttl / 4):
			r.renewAll(ctx)
		}
	}
}

// renewAll renews every kept lease, in batches of at most r.batch, each its own statement
// (and transaction) bounded by an eighth of the TTL.
func (r *renewer) renewAll(ctx context.Context) {
	r.mu.Lock()
	holds := make([]*leaseHold, 0, len(r.held))
	for h := range r.held {
		holds = append(holds, h)
	}
	r.mu.Unlock()
	for len(holds) > 0 && ctx.Err() == nil {
		n := min(len(holds), max(r.batch, 1))
		r.renewBatch(ctx, holds[:n])
		holds = holds[n:]
	}
}

// renewBatch renews the leases of holds in one statement.
func (r *renewer) renewBatch(ctx context.Context, holds []*leaseHold) {
	leases := make([]session.Lease, len(holds))
	for i, h := range holds {
		leases[i] = h.lease
	}
	sent := r.clock.Now()
	rctx, stop := context.WithTimeout(ctx, r.ttl/8)
	renewed, err := r.store.RenewLeases(rctx, leases, r.ttl)
	stop()
	if err != nil {
		if ctx.Err() == nil {
			r.failed(holds, err)
		}
		return
	}
	type key struct {
		id    session.ID
		epoch int64
	}
	got := make(map[key]session.Lease, len(renewed))
	for _, l := range renewed {
		got[key{l.Session, l.Epoch}] = l
	}
	for _, h := range holds {
		l, ok := got[key{h.lease.Session, h.lease.Epoch}]
		if !ok {
			r.lose(h) // taken over, or expired: fenced
			continue
		}
		h.lease, h.validUntil = l, sent.Add(r.ttl)
		h.fence.extend(h.validUntil)
	}
}

// failed handles a batch that was not renewed (err): once a lease may have expired (measured
// on its cell's own clock from before the last successful call, with a margin), another
// replica may run the session, so that cell stops now; the others are retried at the next
// interval. The failure is logged once for the batch, with how many leases it held and how
// many of their cells stopped (each stopped cell says so itself, with its session).
func (r *renewer) failed(holds []*leaseHold, err error) {
	now := r.clock.Now()
	expired := 0
	for _, h := range holds {
		if now.After(h.validUntil.Add(-r.ttl / 4)) {
			r.lose(h)
			expired++
		}
	}
	ev := r.log.Warn().Err(err).Int("leases", len(holds)).Int("expired", expired)
	if expired > 0 {
		ev.Msg("renewer: lease could not be renewed before it expired; those cells stop, the others retry")
		return
	}
	ev.Msg("renewer: renew lease; retrying")
}

func (r *renewer) lose(h *leaseHold) {
	r.drop(h)
	h.cancel(errLeaseLost)
}
