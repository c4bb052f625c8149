// Package hands is a session's sandbox as its turns use it (the "hands" beside the brain):
// provisioned on first use from a recipe, with the channel's repository checked out and its
// setup run, provisioned again when found lost, its uncommitted work saved and restored across
// sandboxes, its egress through a proxy of its own; every step is recorded in the session's
// log (sandbox_provisioned, sandbox_lost, setup_result, work_saved, egress_connection).
package hands

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/logbook/logbook/bot/checkout"
	"github.com/logbook/logbook/bot/forge"
	"github.com/logbook/logbook/sandbox"
	"github.com/logbook/logbook/sandbox/egress"
	"github.com/logbook/logbook/session"
)

// Hands is a session's sandbox, provisioned on first use from a recipe and provisioned
// again when found lost; both are recorded in the session's log (sandbox_provisioned,
// sandbox_lost). It satisfies brain.Hands.
type Hands struct {
	provider sandbox.Provider
	recipe   sandbox.Recipe
	log      Log
	work     WorkStore // nil: uncommitted work is not kept
	egress   *Egress   // nil: no proxy
	offline  bool      // Config.Offline
	repoFor  func(ctx context.Context, team, channel string) (*sandbox.RepoSpec, error)
	sess     session.ThreadKey
	id       session.ID
	key      string
	zl       zerolog.Logger

	mu     sync.Mutex
	sb     sandbox.Sandbox
	commit string // the repository's commit in sb, "" without one
	// unrestored: saved work exists that this sandbox did not get back (git refused it); a
	// clean tree does not shadow it until new work is saved.
	unrestored bool
	// saved is the work as last saved (or restored), so an unchanged tree is not saved again;
	// seen is the work as last looked at (saved, or too large to save after a command), so
	// an unchanged one is not read again.
	saved session.WorkSaved
	seen  sandbox.WorkID
	// instr is the repository's instruction file as last read (bot/checkout); instrFresh
	// says provisioning read it and no turn took it yet.
	instr      checkout.Instructions
	instrFresh bool
	// setup is the channel's setup step (setup.go); setupNote what the thread should be told
	// of the last one (a failure), until Ready says it.
	setup     SetupConfig
	setupNote string
}

// WorkStore keeps saved work by hash (a *filestore.Store).
type WorkStore interface {
	Put(ctx context.Context, id session.ID, data []byte) (string, error)
	FileContent(ctx context.Context, sha string) ([]byte, error)
}

// Config is what sandboxes are made from: the recipe, the repository of a channel (nil:
// an empty workspace), and where uncommitted work is kept across sandboxes.
type Config struct {
	Recipe sandbox.Recipe
	// Repo is the repository a channel's sandboxes check out, asked at each provisioning
	// (nil spec: none).
	Repo   func(ctx context.Context, team, channel string) (*sandbox.RepoSpec, error)
	Work   WorkStore
	Egress *Egress
	// Setup is the channels' setup step (setup.go); zero: none.
	Setup SetupConfig
	// Offline is a sandbox restored exactly, with no way out at all (a what-if replay,
	// bot/replay): no egress proxy, Egress and Setup.Egress notwithstanding (the repository is
	// cloned from the host's mirror before anything runs in the sandbox, and its origin is
	// not reachable from inside), and provisioning fails, instead of going on with a fresh
	// checkout, when the channel has no repository, when the work to restore was saved on
	// another one, or when it cannot be restored. The provider must not share the host's
	// network (sandbox.Config.AllowNetwork off, and bubblewrap: the process provider shares
	// it).
	Offline bool
}

// Egress is the sandboxes' way out (LOGBOOK_SANDBOX_EGRESS): each sandbox gets a proxy of its
// own that reaches only Allow's hosts and serves the session's repository (if any) with its
// credentials added outside, pushes to its base branch refused. Every connection is recorded
// (egress_connection).
type Egress struct {
	Allow egress.Allowlist
	// Transport carries requests to the repository (nil: a fresh http.Transport).
	Transport http.RoundTripper
	// Resolver looks names up for the allowlist (nil: the system's).
	Resolver egress.Resolver
}

// NewFactory returns a Factory over provider (nil: no sandbox tools).
func NewFactory(provider sandbox.Provider, cfg Config, log zerolog.Logger) Factory {
	if provider == nil {
		return nil
	}
	return func(l Log, sess session.Session) *Hands {
		return &Hands{provider: provider, recipe: cfg.Recipe, repoFor: cfg.Repo, sess: sess.Key, log: l, work: cfg.Work, egress: cfg.Egress, id: sess.ID, key: sess.ID.String(), setup: cfg.Setup,
			offline: cfg.Offline,
			zl:      log.With().Str("session_id", sess.ID.String()).Logger()}
	}
}

// Factory provides a session's sandbox lazily; nil disables sandbox tools.
type Factory func(log Log, sess session.Session) *Hands

// Log is what the hands need of the session's (fenced) log.
type Log interface {
	Append(ctx context.Context, evs ...session.NewEvent) ([]session.Event, error)
	Events(ctx context.Context, r session.Range) ([]session.Event, error)
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
	if h.repoFor != nil {
		// Asked at each provisioning: a repository an admin set since applies to the next sandbox.
		spec, err := h.repoFor(ctx, h.sess.Team, h.sess.Channel)
		if err != nil {
			return nil, fmt.Errorf("the channel's repository: %w", err)
		}
		h.recipe.Repo = spec
	}
	if h.offline && (h.recipe.Repo == nil || h.work == nil) {
		return nil, errors.New("the channel has no repository (or no store of saved work), so the session's work cannot be restored")
	}
	recipe := h.recipe
	var proxy *egress.Proxy
	if !h.offline && (h.egress != nil || recipe.Repo != nil || !h.setup.Egress.Empty()) {
		// A repository is fetched and pushed through the proxy, allowlist or not.
		proxy = h.newProxy(h.pushedBranches(ctx))
		recipe.Egress = proxy
	}
	sb, err := h.provider.Provision(ctx, h.key, recipe)
	if err != nil {
		h.zl.Warn().Err(err).Msg("could not provision the sandbox")
		return nil, err
	}
	// The channel's setup, on the checkout as it is, before the saved work goes back on top.
	setup, err := h.runSetup(ctx, sb, proxy, sandbox.Commit(sb))
	if err != nil {
		sb.Close()
		return nil, err
	}
	p := session.SandboxProvisioned{Provider: h.provider.Name(), Steps: len(h.recipe.Steps)}
	if h.recipe.Repo != nil {
		p.Repo, p.Commit = h.recipe.Repo.URL, sandbox.Commit(sb)
	}
	// The work a closed sandbox left uncommitted, on the commit it was made on.
	if err := h.restore(ctx, sb); err != nil {
		if h.offline {
			sb.Close()
			return nil, fmt.Errorf("restore the session's work: %w", err)
		}
		h.zl.Warn().Err(err).Msg("could not restore the saved work into the new sandbox")
	}
	var instr checkout.Instructions
	if h.recipe.Repo != nil {
		if instr, err = checkout.Read(ctx, sb); err != nil {
			h.zl.Warn().Err(err).Msg("could not read the repository's instruction file")
		}
		noteInstructions(&p, instr)
	}
	p.DurationMS = time.Since(t0).Milliseconds()
	evs := []session.NewEvent{{Type: session.TypeSandboxProvisioned, Actor: sandboxActor, Payload: p}}
	if setup != nil {
		evs = append(evs, session.NewEvent{Type: session.TypeSetupResult, Actor: sandboxActor, Payload: *setup})
	}
	if _, err := h.log.Append(ctx, evs...); err != nil {
		sb.Close()
		return nil, err
	}
	h.sb, h.commit = sb, p.Commit
	h.instr, h.instrFresh = instr, true
	if h.saved.Commit != p.Commit {
		h.saved = session.WorkSaved{} // saved against another checkout: the next save records anew
	}
	h.seen = sandbox.WorkID{}
	return sb, nil
}

// PushPrefix is where the sandbox may push: its own branches, never a person's or the base.
const PushPrefix = "logbook/"

// newProxy is a fresh proxy for one sandbox (its Close is the sandbox's).
func (h *Hands) newProxy(owned []string) *egress.Proxy {
	cfg := Egress{}
	if h.egress != nil {
		cfg = *h.egress
	}
	opt := egress.Options{Allow: cfg.Allow, Transport: cfg.Transport, Resolver: cfg.Resolver, Record: h.recordConnection}
	if r := h.recipe.Repo; r != nil {
		opt.Git = &egress.Remote{URL: r.URL, Header: r.Header, BranchPrefix: PushPrefix, Owned: owned}
		if r.Branch != "" {
			opt.Git.Protected = []string{r.Branch}
		}
	}
	return egress.New(opt)
}

// pushedBranches are the branches the session's sandboxes pushed, as the log records them: its
// own, which a new sandbox may push again. Only refs the repository reported updated count
// (EgressConnection.Pushed), never those a push merely asked for.
func (h *Hands) pushedBranches(ctx context.Context) []string {
	evs, err := h.log.Events(ctx, session.Range{Types: []session.Type{session.TypeEgressConnection}})
	if err != nil {
		h.zl.Warn().Err(err).Msg("could not read the session's pushes: its branches count as others'")
		return nil
	}
	return forge.Pushed(evs)
}

// recordConnection appends an egress_connection event: called by the proxy as each
// connection ends, while the command that made it may still run.
func (h *Hands) recordConnection(c egress.Connection) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	p := session.EgressConnection{Kind: c.Kind, Host: c.Host, Port: c.Port, Allowed: c.Allowed, Reason: c.Reason,
		BytesOut: c.BytesOut, BytesIn: c.BytesIn, DurationMS: c.Duration.Milliseconds(), Refs: c.Refs, Pushed: c.Pushed}
	if _, err := h.log.Append(ctx, session.NewEvent{Type: session.TypeEgressConnection, Actor: sandboxActor, Payload: p}); err != nil {
		h.zl.Warn().Err(err).Str("host", c.Host).Int("port", c.Port).Bool("allowed", c.Allowed).Msg("could not record an egress connection")
	}
}

// restore puts the newest saved work back into sb: its commits (same ids, same branch),
// HEAD where it was, and the uncommitted changes on top — whatever commit the new checkout
// is at, as long as the saved HEAD's history is there. What no longer fits is refused by git
// and stays in the file store.
func (h *Hands) restore(ctx context.Context, sb sandbox.Sandbox) error {
	if h.work == nil || h.recipe.Repo == nil {
		return nil
	}
	saved, err := h.log.Events(ctx, session.Range{Types: []session.Type{session.TypeWorkSaved}, Desc: true, Limit: 1})
	if err != nil {
		return err
	}
	var ws session.WorkSaved
	inherited := len(saved) == 0
	if inherited {
		// A fork that saved nothing of its own starts where its parent was at the fork's seq.
		var ok bool
		if ws, ok, err = h.inherited(ctx); err != nil || !ok {
			return err
		}
	} else if err := saved[0].Decode(&ws); err != nil {
		return err
	}
	if ws.Repo != "" && ws.Repo != h.recipe.Repo.URL {
		if h.offline {
			return fmt.Errorf("it was saved on repository %s; the channel's is %s now", ws.Repo, h.recipe.Repo.URL)
		}
		return nil // work on another repository (the channel's was changed since): it stays in the log
	}
	w := sandbox.Work{Head: ws.Head, Branch: ws.Branch, Exact: inherited}
	if ws.Head == "" {
		w.Head = ws.Commit // saved before HEAD was recorded: the patch is against the checkout
	}
	if ws.SHA256 == "" && ws.BundleSHA256 == "" && w.Head == ws.Commit && !inherited {
		// Nothing beyond the checkout it was saved on: the new checkout (the branch as
		// it is now) is the work, not the old commit.
		return nil
	}
	// Until it is back in a sandbox, the saved work must not be shadowed by a clean save.
	h.unrestored = true
	if ws.SHA256 != "" {
		if w.Patch, err = h.work.FileContent(ctx, ws.SHA256); err != nil {
			return err
		}
	}
	if ws.BundleSHA256 != "" {
		if w.Bundle, err = h.work.FileContent(ctx, ws.BundleSHA256); err != nil {
			return err
		}
	}
	if err := sandbox.RestoreWork(ctx, sb, w); err != nil {
		return fmt.Errorf("the saved work (head %s, patch %s, bundle %s) is kept, not applied: %w", ws.Head, ws.SHA256, ws.BundleSHA256, err)
	}
	h.unrestored = false
	h.saved = ws
	return nil
}

// Lineage is a fork's log as the cell keeps it: the conversation the fork continues, each
// ancestor's events through the seq it was branched at, oldest first (none for a session that
// is no fork).
type Lineage interface {
	Prefix(ctx context.Context) ([][]session.Event, error)
}

// inherited is where a fork's sandbox starts when the fork saved no work of its own: the
// newest work its ancestors saved at or before the fork's seq, else the commit the newest of
// their sandboxes was checked out at (the repository as the parent had it then). false: no
// fork, or its ancestors had no sandbox.
func (h *Hands) inherited(ctx context.Context) (session.WorkSaved, bool, error) {
	l, ok := h.log.(Lineage)
	if !ok {
		return session.WorkSaved{}, false, nil
	}
	segs, err := l.Prefix(ctx)
	if err != nil || len(segs) == 0 {
		return session.WorkSaved{}, false, err
	}
	newest := func(typ session.Type) (session.Event, bool) {
		for i := len(segs) - 1; i >= 0; i-- {
			for j := len(segs[i]) - 1; j >= 0; j-- {
				if e := segs[i][j]; e.Type == typ && e.Payload != nil {
					return e, true
				}
			}
		}
		return session.Event{}, false
	}
	if e, ok := newest(session.TypeWorkSaved); ok {
		var ws session.WorkSaved
		return ws, true, e.Decode(&ws)
	}
	e, ok := newest(session.TypeSandboxProvisioned)
	if !ok {
		return session.WorkSaved{}, false, nil
	}
	var p session.SandboxProvisioned
	if err := e.Decode(&p); err != nil || p.Commit == "" || !sandbox.ValidCommitID(p.Commit) {
		return session.WorkSaved{}, false, err
	}
	return session.WorkSaved{Repo: p.Repo, Commit: p.Commit, Head: p.Commit}, true, nil
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

// Exec runs a command in the sandbox; the work it leaves is saved (work_saved) before the
// result goes back, so a crash after it loses nothing the command did.
func (h *Hands) Exec(ctx context.Context, req sandbox.ExecRequest) (sandbox.ExecResult, error) {
	res, err := do(ctx, h, func(sb sandbox.Sandbox) (sandbox.ExecResult, error) { return sb.Exec(ctx, req) })
	if err == nil {
		h.checkpoint(ctx)
	}
	return res, err
}

// ReadFile reads a file of the workspace.
func (h *Hands) ReadFile(ctx context.Context, path string) ([]byte, error) {
	return do(ctx, h, func(sb sandbox.Sandbox) ([]byte, error) { return sb.ReadFile(ctx, path) })
}

// WriteFile writes a file of the workspace, and saves the work.
func (h *Hands) WriteFile(ctx context.Context, path string, data []byte) error {
	_, err := do(ctx, h, func(sb sandbox.Sandbox) (struct{}, error) { return struct{}{}, sb.WriteFile(ctx, path, data) })
	if err == nil {
		h.checkpoint(ctx)
	}
	return err
}

// checkpoint saves the work tree when it changed since the last save. A failure is logged:
// the command's result stands, and the next save (or the one at Close) tries again.
func (h *Hands) checkpoint(ctx context.Context) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.work == nil || h.recipe.Repo == nil || h.sb == nil {
		return
	}
	if err := h.save(ctx, h.sb, true); err != nil {
		h.zl.Warn().Err(err).Msg("could not save the sandbox's work")
	}
}

// Close closes the sandbox, if one was provisioned. With save (the cell still holds its
// lease), its work — commits and uncommitted changes — is saved first (work_saved) if it
// changed since the last save, for the next sandbox: sandboxes are disposable, work is not.
func (h *Hands) Close(ctx context.Context, save bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.sb == nil {
		return
	}
	if save && h.work != nil && h.recipe.Repo != nil {
		if err := h.save(ctx, h.sb, false); err != nil {
			h.zl.Warn().Err(err).Msg("could not save the sandbox's uncommitted work")
		}
	}
	h.sb.Close()
	h.sb = nil
}

func (h *Hands) save(ctx context.Context, sb sandbox.Sandbox, checkpoint bool) error {
	saved := sandbox.WorkID{Head: h.saved.Head, Branch: h.saved.Branch, PatchSHA256: h.saved.SHA256, BundleSHA256: h.saved.BundleSHA256}
	prev := saved
	if checkpoint && h.seen != (sandbox.WorkID{}) {
		prev = h.seen // unchanged since a look that did not save: nothing to read
	}
	w, id, err := sandbox.SaveWork(ctx, sb, h.commit, prev)
	if err != nil {
		return err
	}
	if id == prev {
		return nil // as saved, or looked at, last
	}
	if prev != saved && (unread(id.PatchSHA256, saved.PatchSHA256, w.Patch) || unread(id.BundleSHA256, saved.BundleSHA256, w.Bundle)) {
		// A part the look before did not save is unchanged, so it was not read: read
		// everything not stored yet.
		if w, id, err = sandbox.SaveWork(ctx, sb, h.commit, saved); err != nil {
			return err
		}
	}
	h.seen = sandbox.WorkID{}
	if id.Clean(h.commit) && (h.unrestored || h.saved == (session.WorkSaved{})) {
		// A clean tree: nothing to keep when nothing was saved before, and a sandbox that
		// never got the saved work back must not shadow it.
		if !h.unrestored {
			h.saved = session.WorkSaved{Repo: h.recipe.Repo.URL, Commit: h.commit, Head: id.Head, Branch: id.Branch}
		}
		return nil
	}
	if checkpoint && len(w.Patch)+len(w.Bundle) > checkpointMax {
		// Stored at every command this would grow the file store fast; the save when the
		// sandbox closes keeps it.
		h.zl.Debug().Int("bytes", len(w.Patch)+len(w.Bundle)).Msg("work over the checkpoint bound: saved when the sandbox closes")
		h.seen = id
		return nil
	}
	ws := session.WorkSaved{Repo: h.recipe.Repo.URL, Commit: h.commit, Head: id.Head, Branch: id.Branch, SHA256: id.PatchSHA256,
		BundleSHA256: id.BundleSHA256, Size: h.saved.Size, BundleSize: h.saved.BundleSize}
	if id.PatchSHA256 == "" {
		ws.Size = 0
	}
	if id.BundleSHA256 == "" {
		ws.BundleSize = 0
	}
	for _, c := range []struct {
		data []byte
		size *int64
	}{{w.Patch, &ws.Size}, {w.Bundle, &ws.BundleSize}} {
		if len(c.data) == 0 {
			continue
		}
		if _, err := h.work.Put(ctx, h.id, c.data); err != nil {
			return err
		}
		*c.size = int64(len(c.data))
	}
	if _, err = h.log.Append(ctx, session.NewEvent{Type: session.TypeWorkSaved, Actor: sandboxActor, Payload: ws}); err != nil {
		return err
	}
	h.saved, h.unrestored = ws, false
	return nil
}

// unread reports whether a part named sha is neither stored (stored) nor read (data).
func unread(sha, stored string, data []byte) bool { return sha != "" && sha != stored && data == nil }

// checkpointMax bounds the work saved after each command (patch and bundle together); more is
// saved only when the sandbox closes.
const checkpointMax = 16 << 20

// Start starts a long-lived process in the sandbox (a local MCP server), provisioning the
// sandbox first if need be. A sandbox that cannot (the "none" provider) gives
// sandbox.ErrDisabled.
func (h *Hands) Start(ctx context.Context, req sandbox.StartRequest) (*sandbox.Process, error) {
	return do(ctx, h, func(sb sandbox.Sandbox) (*sandbox.Process, error) {
		st, ok := sb.(sandbox.Starter)
		if !ok {
			return nil, sandbox.ErrDisabled
		}
		return st.Start(ctx, req)
	})
}

// noteInstructions puts what provisioning read into sandbox_provisioned.
func noteInstructions(p *session.SandboxProvisioned, r checkout.Instructions) {
	p.Instructions, p.InstructionsHash, p.InstructionsSize = r.Path, r.Hash, r.Size
}

// Instructions is the repository's instruction file for this turn: read at provisioning, and
// read again at each later turn, so a file that changed during the session (the agent edited
// it, a pull brought a new one) is the one the next turn gets. A channel with a repository has
// its sandbox provisioned here (the instructions come before the first model call); one
// without gets nothing and no sandbox. h nil: none.
func (h *Hands) Instructions(ctx context.Context) (checkout.Instructions, error) {
	if h == nil || h.repoFor == nil {
		return checkout.Instructions{}, nil
	}
	h.mu.Lock()
	sb, fresh := h.sb, h.instrFresh
	h.instrFresh = false
	h.mu.Unlock()
	if sb == nil {
		spec, err := h.repoFor(ctx, h.sess.Team, h.sess.Channel)
		if err != nil || spec == nil {
			return checkout.Instructions{}, err
		}
		if _, err := h.get(ctx); err != nil {
			return checkout.Instructions{}, err
		}
		h.mu.Lock()
		defer h.mu.Unlock()
		h.instrFresh = false
		return h.instr, nil // read by get, at provisioning
	}
	if fresh {
		h.mu.Lock()
		defer h.mu.Unlock()
		return h.instr, nil
	}
	if h.commit == "" {
		return checkout.Instructions{}, nil // no repository in this sandbox
	}
	r, err := do(ctx, h, func(sb sandbox.Sandbox) (checkout.Instructions, error) { return checkout.Read(ctx, sb) })
	if err != nil {
		return checkout.Instructions{}, err
	}
	h.mu.Lock()
	h.instr = r
	h.mu.Unlock()
	return r, nil
}

// NestedInstructions reads the instruction files (AGENTS.md, else CLAUDE.md) of the
// directories of files the agent touched in the session (evs), nearest first, as other
// agents do: at most checkout.MaxNested, and checkout.MaxRepoInstructions bytes in all. Only from a sandbox
// that is there with a repository: it provisions nothing.
func (h *Hands) NestedInstructions(ctx context.Context, evs []session.Event) []checkout.Instructions {
	if h == nil {
		return nil
	}
	h.mu.Lock()
	sb, commit := h.sb, h.commit
	h.mu.Unlock()
	if sb == nil || commit == "" {
		return nil
	}
	var out []checkout.Instructions
	left := checkout.MaxRepoInstructions
	for _, dir := range checkout.TouchedDirs(evs) {
		if len(out) == checkout.MaxNested || left <= 0 {
			break
		}
		r, err := checkout.Read(ctx, checkout.InDir{Sandbox: sb, Dir: dir})
		if err != nil || r.Path == "" {
			continue
		}
		r.Path = dir + "/" + r.Path
		if len(r.Text) > left {
			r.Text, r.Cut = strings.ToValidUTF8(r.Text[:left], ""), true
		}
		left -= len(r.Text)
		out = append(out, r)
	}
	return out
}
