package bot

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/logbook/logbook/sandbox"
	"github.com/logbook/logbook/session"
)

// Hands is a session's sandbox, provisioned on first use from a recipe and provisioned
// again when found lost; both are recorded in the session's log (sandbox_provisioned,
// sandbox_lost). It satisfies brain.Hands.
type Hands struct {
	provider sandbox.Provider
	recipe   sandbox.Recipe
	log      appendLog
	key      string
	zl       zerolog.Logger

	mu sync.Mutex
	sb sandbox.Sandbox
}

// NewHandsFactory returns a HandsFactory over provider (nil: no sandbox tools).
func NewHandsFactory(provider sandbox.Provider, recipe sandbox.Recipe, log zerolog.Logger) HandsFactory {
	if provider == nil {
		return nil
	}
	return func(l appendLog, sess session.Session) *Hands {
		return &Hands{provider: provider, recipe: recipe, log: l, key: sess.ID.String(),
			zl: log.With().Str("session_id", sess.ID.String()).Logger()}
	}
}

// appendLog is what the hands need of the session's (fenced) log.
type appendLog interface {
	Append(ctx context.Context, evs ...session.NewEvent) ([]session.Event, error)
}

var sandboxActor = session.Actor{Kind: session.ActorSystem, ID: "sandbox"}

// get returns the live sandbox, provisioning one if there is none.
func (h *Hands) get(ctx context.Context) (sandbox.Sandbox, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.sb != nil {
		return h.sb, nil
	}
	t0 := time.Now()
	sb, err := h.provider.Provision(ctx, h.key, h.recipe)
	if err != nil {
		return nil, err
	}
	if _, err := h.log.Append(ctx, session.NewEvent{Type: session.TypeSandboxProvisioned, Actor: sandboxActor,
		Payload: session.SandboxProvisioned{Provider: h.provider.Name(), Steps: len(h.recipe.Steps),
			DurationMS: time.Since(t0).Milliseconds()}}); err != nil {
		sb.Close()
		return nil, err
	}
	h.sb = sb
	return sb, nil
}

// lost records that sb is gone and forgets it, so the next call provisions a fresh one.
func (h *Hands) lost(ctx context.Context, sb sandbox.Sandbox, cause error) {
	h.mu.Lock()
	if h.sb != sb {
		h.mu.Unlock()
		return
	}
	h.sb = nil
	h.mu.Unlock()
	sb.Close()
	h.zl.Warn().Err(cause).Msg("sandbox lost; the next call provisions a new one from the recipe")
	if _, err := h.log.Append(ctx, session.NewEvent{Type: session.TypeSandboxLost, Actor: sandboxActor,
		Payload: session.SandboxLost{Reason: cause.Error()}}); err != nil {
		h.zl.Warn().Err(err).Msg("append sandbox_lost")
	}
}

// do runs f on the sandbox, re-provisioning once if it was lost.
func do[T any](ctx context.Context, h *Hands, f func(sandbox.Sandbox) (T, error)) (T, error) {
	var zero T
	for attempt := 0; ; attempt++ {
		sb, err := h.get(ctx)
		if err != nil {
			return zero, err
		}
		v, err := f(sb)
		if errors.Is(err, sandbox.ErrLost) && attempt == 0 && ctx.Err() == nil {
			h.lost(ctx, sb, err)
			continue
		}
		return v, err
	}
}

// Exec runs a command in the sandbox.
func (h *Hands) Exec(ctx context.Context, req sandbox.ExecRequest) (sandbox.ExecResult, error) {
	return do(ctx, h, func(sb sandbox.Sandbox) (sandbox.ExecResult, error) { return sb.Exec(ctx, req) })
}

// ReadFile reads a file of the workspace.
func (h *Hands) ReadFile(ctx context.Context, path string) ([]byte, error) {
	return do(ctx, h, func(sb sandbox.Sandbox) ([]byte, error) { return sb.ReadFile(ctx, path) })
}

// WriteFile writes a file of the workspace.
func (h *Hands) WriteFile(ctx context.Context, path string, data []byte) error {
	_, err := do(ctx, h, func(sb sandbox.Sandbox) (struct{}, error) { return struct{}{}, sb.WriteFile(ctx, path, data) })
	return err
}

// Close closes the sandbox, if one was provisioned.
func (h *Hands) Close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.sb != nil {
		h.sb.Close()
		h.sb = nil
	}
}
