package bot

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"

	"github.com/logbook/logbook/session"
)

// A batch that could not be renewed is logged once, with the number of leases it held and of
// those whose cells stop, not once per lease; per lease nothing changes: a lease that may have
// expired stops its cell (errLeaseLost) and is no longer kept, the others are kept for the
// next renewal.
func TestRenewerLogsAFailedBatchOnce(t *testing.T) {
	t.Parallel()
	// A closed pool refuses every query at once: the renewal fails without a database.
	pool, err := pgxpool.New(context.Background(), "postgres://logbook@127.0.0.1:1/none")
	if err != nil {
		t.Fatal(err)
	}
	pool.Close()
	var out bytes.Buffer
	log := zerolog.New(&out)
	now := time.Date(2026, 12, 2, 8, 0, 0, 0, time.UTC)
	const ttl = 20 * time.Second
	r := newRenewer(session.NewStore(pool, session.Options{}), &fakeClock{now: now}, ttl, log)
	type held struct {
		h     *leaseHold
		cause error
	}
	var holds []*held
	for _, left := range []time.Duration{ttl, ttl, ttl / 8, ttl / 8, ttl / 8} { // until validUntil
		x := &held{}
		var id session.ID
		id[0] = byte(len(holds) + 1)
		x.h = &leaseHold{lease: session.Lease{Session: id, Owner: "r1", Epoch: 1}, validUntil: now.Add(left), log: log,
			cancel: func(cause error) { x.cause = cause }}
		r.keep(x.h)
		holds = append(holds, x)
	}
	r.renewAll(context.Background())

	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 1 || !strings.Contains(lines[0], `"leases":5`) || !strings.Contains(lines[0], `"expired":3`) ||
		!strings.Contains(lines[0], "lease could not be renewed") || !strings.Contains(lines[0], `"level":"warn"`) {
		t.Fatalf("want one warning for the batch (5 leases, 3 expired), got %d lines:\n%s", len(lines), out.String())
	}
	for i, x := range holds {
		_, kept := r.held[x.h]
		expired := i >= 2
		if expired != errors.Is(x.cause, errLeaseLost) || expired == kept {
			t.Errorf("lease %d (expired %v): kept %v, cancelled with %v", i, expired, kept, x.cause)
		}
	}

	// None may have expired: one line again, and every cell goes on.
	out.Reset()
	r.renewAll(context.Background())
	if got := strings.TrimSpace(out.String()); strings.Count(got, "\n") != 0 || !strings.Contains(got, `"leases":2`) ||
		!strings.Contains(got, `"expired":0`) || !strings.Contains(got, "renew lease; retrying") {
		t.Fatalf("want one retry warning for the 2 leases left:\n%s", out.String())
	}
	if len(r.held) != 2 || holds[0].cause != nil || holds[1].cause != nil {
		t.Fatalf("a retried lease was dropped or cancelled: %d kept, causes %v %v", len(r.held), holds[0].cause, holds[1].cause)
	}
}
