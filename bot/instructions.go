package bot

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io/fs"
	"path"
	"strings"
	"unicode/utf8"

	"github.com/logbook/logbook/bot/brain"
	"github.com/logbook/logbook/sandbox"
	"github.com/logbook/logbook/session"
)

// The repository's instruction file: the first of these at the root of the checkout, as other
// agents read it. At most MaxRepoInstructions bytes of it reach the system prompt.
var instructionFiles = []string{"AGENTS.md", "CLAUDE.md"}

// MaxRepoInstructions caps the repository's instructions in the system prompt, in bytes.
const MaxRepoInstructions = 32 << 10

// repoInstructions is the instruction file as last read from the sandbox: Hash is the sha256
// (hex) of the whole file.
type repoInstructions struct {
	brain.RepoInstructions
	Hash string
	Size int
}

// readInstructions reads the repository's instruction file from sb; the zero value when the
// checkout has none (or it is not text). Errors are the sandbox's (ErrLost, ctx).
func readInstructions(ctx context.Context, sb sandbox.Sandbox) (repoInstructions, error) {
	for _, name := range instructionFiles {
		data, err := sb.ReadFile(ctx, name)
		switch {
		case errors.Is(err, fs.ErrNotExist) || errors.Is(err, sandbox.ErrNotRegular) || errors.Is(err, sandbox.ErrOutsideWorkspace):
			continue // absent, a directory, a link out of the workspace: not an instruction file
		case errors.Is(err, sandbox.ErrTooLarge):
			continue
		case err != nil:
			return repoInstructions{}, err
		}
		sum := sha256.Sum256(data)
		r := repoInstructions{Hash: hex.EncodeToString(sum[:]), Size: len(data)}
		r.Path = name
		if len(data) > MaxRepoInstructions {
			data, r.Cut = data[:MaxRepoInstructions], true
			for len(data) > 0 && !utf8.Valid(data) {
				data = data[:len(data)-1] // a rune cut in two
			}
		}
		if !utf8.Valid(data) {
			continue
		}
		r.Text = string(data)
		return r, nil
	}
	return repoInstructions{}, nil
}

// noteInstructions puts what provisioning read into sandbox_provisioned.
func noteInstructions(p *session.SandboxProvisioned, r repoInstructions) {
	p.Instructions, p.InstructionsHash, p.InstructionsSize = r.Path, r.Hash, r.Size
}

// Instructions is the repository's instruction file for this turn: read at provisioning, and
// read again at each later turn, so a file that changed during the session (the agent edited
// it, a pull brought a new one) is the one the next turn gets. A channel with a repository has
// its sandbox provisioned here (the instructions come before the first model call); one
// without gets nothing and no sandbox. h nil: none.
func (h *Hands) Instructions(ctx context.Context) (repoInstructions, error) {
	if h == nil || h.repoFor == nil {
		return repoInstructions{}, nil
	}
	h.mu.Lock()
	sb, fresh := h.sb, h.instrFresh
	h.instrFresh = false
	h.mu.Unlock()
	if sb == nil {
		spec, err := h.repoFor(ctx, h.sess.Team, h.sess.Channel)
		if err != nil || spec == nil {
			return repoInstructions{}, err
		}
		if _, err := h.get(ctx); err != nil {
			return repoInstructions{}, err
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
		return repoInstructions{}, nil // no repository in this sandbox
	}
	r, err := do(ctx, h, func(sb sandbox.Sandbox) (repoInstructions, error) { return readInstructions(ctx, sb) })
	if err != nil {
		return repoInstructions{}, err
	}
	h.mu.Lock()
	h.instr = r
	h.mu.Unlock()
	return r, nil
}

// maxNested bounds the nested instruction files a turn reads (directories of files the agent
// touched), and MaxRepoInstructions their text in all.
const maxNested = 5

// touchedDirs is the directories (relative, below the root) of the files the session's agent
// read or wrote (read_file, write_file, attach_file calls), newest first, each once.
func touchedDirs(evs []session.Event) []string {
	var dirs []string
	seen := map[string]bool{}
	calls := session.Select(evs, session.Range{Types: []session.Type{session.TypeToolCall}})
	for i := len(calls) - 1; i >= 0; i-- {
		var c session.ToolCall
		var in struct {
			Path string `json:"path"`
		}
		if calls[i].Decode(&c) != nil || (c.Name != brain.ToolReadFile && c.Name != brain.ToolWriteFile && c.Name != brain.ToolAttachFile) ||
			json.Unmarshal(c.Input, &in) != nil {
			continue
		}
		p := path.Clean("/" + strings.TrimPrefix(in.Path, "/workspace/"))
		for d := path.Dir(p); d != "/" && d != "."; d = path.Dir(d) {
			if rel := strings.TrimPrefix(d, "/"); !seen[rel] {
				seen[rel] = true
				dirs = append(dirs, rel)
			}
		}
	}
	return dirs
}

// NestedInstructions reads the instruction files (AGENTS.md, else CLAUDE.md) of the
// directories of files the agent touched in the session (evs), nearest first, as other
// agents do: at most maxNested, and MaxRepoInstructions bytes in all. Only from a sandbox
// that is there with a repository: it provisions nothing.
func (h *Hands) NestedInstructions(ctx context.Context, evs []session.Event) []repoInstructions {
	if h == nil {
		return nil
	}
	h.mu.Lock()
	sb, commit := h.sb, h.commit
	h.mu.Unlock()
	if sb == nil || commit == "" {
		return nil
	}
	var out []repoInstructions
	left := MaxRepoInstructions
	for _, dir := range touchedDirs(evs) {
		if len(out) == maxNested || left <= 0 {
			break
		}
		r, err := readInstructions(ctx, dirSandbox{sb, dir})
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

// dirSandbox reads files of sb relative to dir.
type dirSandbox struct {
	sandbox.Sandbox
	dir string
}

func (d dirSandbox) ReadFile(ctx context.Context, name string) ([]byte, error) {
	return d.Sandbox.ReadFile(ctx, d.dir+"/"+name)
}
