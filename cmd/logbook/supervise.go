package main

import (
	"context"
	"errors"
	"fmt"

	"golang.org/x/sync/errgroup"
)

// service is a long-lived piece of serve (the bot, the search indexer, the audit scheduler,
// the HTTP server...): its run returns when its ctx ends.
type service struct {
	name string
	run  func(ctx context.Context) error
}

// supervise runs the services under one errgroup until ctx ends or one fails (which cancels
// the others), and returns after all of them have returned. A service that ends because its
// ctx did is no error; another error is reported under the service's name.
func supervise(ctx context.Context, services ...service) error {
	g, ctx := errgroup.WithContext(ctx)
	for _, s := range services {
		g.Go(func() error {
			err := s.run(ctx)
			if err == nil || errors.Is(err, context.Canceled) {
				return nil
			}
			return fmt.Errorf("%s: %w", s.name, err)
		})
	}
	return g.Wait()
}
