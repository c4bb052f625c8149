package brain

import (
	"cmp"
	"encoding/json"
	"strings"

	"github.com/logbook/logbook/session/clip"
)

// live drives a turn's Live. Its methods do nothing on a nil *live or a nil Live, so title and
// summary calls (which pass nil) and turns without a live view cost nothing.
type live struct {
	l     Live
	round strings.Builder // the text sent in the round so far
	kept  int             // bytes of round sent by calls that succeeded (a continued reply's parts)
}

// onText is what a reply round's Request.OnText is: nil without a Live, so the provider does
// not stream.
func (v *live) onText() func(string) {
	if v == nil || v.l == nil {
		return nil
	}
	return func(delta string) {
		v.round.WriteString(delta)
		v.l.Text(delta)
	}
}

func (v *live) status(text string) {
	if v != nil && v.l != nil {
		v.l.Status(text)
	}
}

// callDone keeps the text of a call that succeeded.
func (v *live) callDone() {
	if v != nil {
		v.kept = v.round.Len()
	}
}

// callFailed voids the text a failed call sent: Restart, then the round's kept text again.
func (v *live) callFailed() {
	if v == nil || v.l == nil || v.round.Len() == v.kept {
		return
	}
	keep := v.round.String()[:v.kept]
	v.round.Reset()
	v.l.Restart()
	if keep != "" {
		v.round.WriteString(keep)
		v.l.Text(keep)
	}
}

// discard voids all of the round's text (a refused answer).
func (v *live) discard() {
	if v == nil || v.l == nil || v.round.Len() == 0 {
		return
	}
	v.round.Reset()
	v.kept = 0
	v.l.Restart()
}

func (v *live) endRound(reply bool) {
	if v == nil || v.l == nil {
		return
	}
	v.round.Reset()
	v.kept = 0
	v.l.EndRound(reply)
}

// tool reports a call's state; out is its result for ToolComplete and ToolError.
func (v *live) tool(use ToolUse, status, out string) {
	if v == nil || v.l == nil {
		return
	}
	p := ToolProgress{CallID: use.ID, Name: use.Name, Title: toolTitle(use), Status: status}
	if status == ToolComplete || status == ToolError {
		p.Output = excerpt(out, 200)
	}
	v.l.Tool(p)
}

// toolArgs is the input fields the live view names a call by.
type toolArgs struct {
	Command string `json:"command"`
	Path    string `json:"path"`
	Query   string `json:"query"`
}

func parseToolArgs(use ToolUse) toolArgs {
	var a toolArgs
	_ = json.Unmarshal(use.Input, &a) // a bad input names the call by its tool alone
	a.Command, a.Path, a.Query = oneLine(a.Command), oneLine(a.Path), oneLine(a.Query)
	return a
}

// toolTitle is one line saying what a call runs: "run_command: make test".
func toolTitle(use ToolUse) string {
	a := parseToolArgs(use)
	if arg := cmp.Or(a.Command, a.Path, a.Query); arg != "" {
		return use.Name + ": " + arg
	}
	return use.Name
}

// Describer is a Tool that says in a few words what a call of it does, for the live view's
// status ("attaching report.pdf"); a Tool without it shows "running <name>".
type Describer interface {
	Doing(use ToolUse) string
}

// doing is the turn's status while use runs.
func (st *turn) doing(use ToolUse) string {
	if d, ok := st.byName[use.Name].(Describer); ok {
		return d.Doing(use)
	}
	return toolStatus(use)
}

// toolStatus is the turn's status while a call of the brain's own tools runs: "running
// `make test`".
func toolStatus(use ToolUse) string {
	a := parseToolArgs(use)
	switch use.Name {
	case ToolRunCommand:
		return "running `" + a.Command + "`"
	case ToolReadFile:
		return "reading " + a.Path
	case ToolWriteFile:
		return "writing " + a.Path
	case ToolReadLog:
		return "rereading this thread's log"
	}
	return "running " + use.Name
}

// oneLine is s's first line, cut to 80 bytes (clip.Text), "…" marking what was left out.
func oneLine(s string) string {
	s = strings.TrimSpace(s)
	line, rest, _ := strings.Cut(s, "\n")
	line = strings.TrimSpace(line)
	if out := clip.Text(line, 80); out != line || rest == "" {
		return out
	}
	return line + " …"
}

// excerpt is at most n bytes of a tool result: all of it when short, else its first and last
// lines (each cut) around a "…" line.
func excerpt(s string, n int) string {
	s = strings.TrimSpace(s)
	if len(s) <= n {
		return s
	}
	first, _, _ := strings.Cut(s, "\n")
	last := s[strings.LastIndex(s, "\n")+1:]
	if !strings.Contains(s, "\n") {
		return clip.Text(s, n)
	}
	const gap = "\n…\n"
	half := (n - len(gap)) / 2
	return clip.Text(first, half) + gap + clip.Tail(last, half)
}
