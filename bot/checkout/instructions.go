// Package checkout is the repository's side of a turn: its instruction files (AGENTS.md, else
// CLAUDE.md, at the root and in the directories the agent touched) in the system prompt, and
// the channel's setup step run before the turn's first model call. The session's sandbox
// (hands.Hands) reads and provisions; this package decides what the turn gets of it.
package checkout

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
	"github.com/logbook/logbook/bot/files"
	"github.com/logbook/logbook/sandbox"
	"github.com/logbook/logbook/session"
)

// The repository's instruction file: the first of these at the root of the checkout, as other
// agents read it. At most MaxRepoInstructions bytes of it reach the system prompt.
var instructionFiles = []string{"AGENTS.md", "CLAUDE.md"}

// MaxRepoInstructions caps the repository's instructions in the system prompt, in bytes.
const MaxRepoInstructions = 32 << 10

// Instructions is the instruction file as last read from the sandbox: Hash is the sha256
// (hex) of the whole file.
type Instructions struct {
	brain.RepoInstructions
	Hash string
	Size int
}

// Read reads the repository's instruction file from sb; the zero value when the
// checkout has none (or it is not text). Errors are the sandbox's (ErrLost, ctx).
func Read(ctx context.Context, sb sandbox.Sandbox) (Instructions, error) {
	for _, name := range instructionFiles {
		data, err := sb.ReadFile(ctx, name)
		switch {
		case errors.Is(err, fs.ErrNotExist) || errors.Is(err, sandbox.ErrNotRegular) || errors.Is(err, sandbox.ErrOutsideWorkspace):
			continue // absent, a directory, a link out of the workspace: not an instruction file
		case errors.Is(err, sandbox.ErrTooLarge):
			continue
		case err != nil:
			return Instructions{}, err
		}
		sum := sha256.Sum256(data)
		r := Instructions{Hash: hex.EncodeToString(sum[:]), Size: len(data)}
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
	return Instructions{}, nil
}

// MaxNested bounds the nested instruction files a turn reads (directories of files the agent
// touched), and MaxRepoInstructions their text in all.
const MaxNested = 5

// TouchedDirs is the directories (relative, below the root) of the files the session's agent
// read or wrote (read_file, write_file, attach_file calls), newest first, each once.
func TouchedDirs(evs []session.Event) []string {
	var dirs []string
	seen := map[string]bool{}
	calls := session.Select(evs, session.Range{Types: []session.Type{session.TypeToolCall}})
	for i := len(calls) - 1; i >= 0; i-- {
		var c session.ToolCall
		var in struct {
			Path string `json:"path"`
		}
		if calls[i].Decode(&c) != nil || (c.Name != brain.ToolReadFile && c.Name != brain.ToolWriteFile && c.Name != files.ToolAttach) ||
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

// InDir reads files of sb relative to dir.
type InDir struct {
	sandbox.Sandbox
	Dir string
}

func (d InDir) ReadFile(ctx context.Context, name string) ([]byte, error) {
	return d.Sandbox.ReadFile(ctx, d.Dir+"/"+name)
}
