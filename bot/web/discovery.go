package web

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"github.com/rs/zerolog"

	"github.com/logbook/logbook/bot/wait"
)

// ErrNotDiscovered is Discovery.Err's answer before the first attempt has ended.
var ErrNotDiscovered = errors.New("the OIDC provider has not been discovered yet")

// Discovery is an OpenID Connect provider found through its discovery document
// (/.well-known/openid-configuration), shared by the sign-in pages and /readyz: the pages
// discover it on first use (and again after a failure), and [Discovery.Run] tries at start and
// until it succeeds, so that an issuer that cannot be reached is said at once, and sign-in
// recovers by itself once it can be. Safe for concurrent use.
type Discovery struct {
	issuer string
	client *http.Client

	mu       sync.Mutex
	provider *oidc.Provider
	err      error // the last attempt's failure; ErrNotDiscovered before one ended
}

// NewDiscovery returns the discovery of issuer through client (nil: a 10 s timeout).
func NewDiscovery(issuer string, client *http.Client) *Discovery {
	if client == nil {
		client = &http.Client{Timeout: 10 * time.Second}
	}
	return &Discovery{issuer: issuer, client: client, err: ErrNotDiscovered}
}

// Issuer is the provider's issuer URL.
func (d *Discovery) Issuer() string { return d.issuer }

// Provider returns the provider, reading its discovery document the first time (and again
// after a failure).
func (d *Discovery) Provider(ctx context.Context) (*oidc.Provider, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.provider != nil {
		return d.provider, nil
	}
	// The provider keeps the client (not ctx's cancellation) for fetching keys later.
	p, err := oidc.NewProvider(oidc.ClientContext(context.WithoutCancel(ctx), d.client), d.issuer)
	if err != nil {
		d.err = fmt.Errorf("discover the OIDC provider %s: %w", d.issuer, err)
		return nil, d.err
	}
	d.provider, d.err = p, nil
	return p, nil
}

// Err is nil once the provider was discovered; else why sign-in cannot work yet (the last
// attempt's failure, or ErrNotDiscovered).
func (d *Discovery) Err() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.err
}

// RetryOptions pace [Discovery.Run]: the first wait after a failure, doubled after each up to
// Max (defaults 1s and 1m); Wait waits d or until ctx ends (default a timer; tests inject one).
type RetryOptions struct {
	First, Max time.Duration
	Wait       func(ctx context.Context, d time.Duration) error
}

// Run discovers the provider now, logging a failure as an error that names the issuer and
// why (sign-in does not work until it succeeds), and tries again with backoff until it does,
// then logs that and returns nil; or until ctx ends (its error).
func (d *Discovery) Run(ctx context.Context, log zerolog.Logger, r RetryOptions) error {
	delay := cmp.Or(r.First, time.Second)
	maxWait := cmp.Or(r.Max, time.Minute)
	sleep := r.Wait
	if sleep == nil {
		sleep = wait.Sleep
	}
	for attempt := 1; ; attempt++ {
		actx, cancel := context.WithTimeout(ctx, 30*time.Second)
		_, err := d.Provider(actx)
		cancel()
		if err == nil {
			if attempt > 1 {
				log.Info().Str("issuer", d.issuer).Int("attempts", attempt).Msg("OIDC provider discovered: sign-in works now")
			} else {
				log.Info().Str("issuer", d.issuer).Msg("OIDC provider discovered")
			}
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		log.Error().Str("issuer", d.issuer).Str("error", err.Error()).Int("attempt", attempt).Dur("retry_in", delay).
			Msg("OIDC sign-in does NOT work: the provider (LOGBOOK_OIDC_ISSUER) cannot be discovered; /readyz is unready until it can, retrying")
		if err := sleep(ctx, delay); err != nil {
			return err
		}
		delay = min(2*delay, maxWait)
	}
}
