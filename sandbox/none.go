package sandbox

import "context"

// noneProvider hands out sandboxes that refuse everything with ErrDisabled:
// command tools are switched off, but the brain's code path stays the same.
type noneProvider struct{}

func (noneProvider) Name() string { return KindNone }

// Provision ignores the recipe: nothing can run.
func (noneProvider) Provision(ctx context.Context, key string, recipe Recipe) (Sandbox, error) {
	return disabled{}, nil
}

type disabled struct{}

func (disabled) Exec(ctx context.Context, req ExecRequest) (ExecResult, error) {
	return ExecResult{}, ErrDisabled
}

func (disabled) ReadFile(ctx context.Context, path string) ([]byte, error) { return nil, ErrDisabled }

func (disabled) WriteFile(ctx context.Context, path string, data []byte) error { return ErrDisabled }

func (disabled) Alive(ctx context.Context) error { return nil }

func (disabled) Close() error { return nil }
