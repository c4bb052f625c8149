package transcript

import (
	"bufio"
	"fmt"
	"io"
	"strings"
)

// Labels shared by every format.
const (
	deletedLabel = "[message deleted]"
	editedLabel  = "(edited)"
)

func (t *Transcript) writeText(w io.Writer) error {
	b := bufio.NewWriter(w)
	fmt.Fprintln(b, t.Heading())
	fmt.Fprintf(b, "Session %s · #%s · thread %s\n", t.SessionID, t.ChannelLabel(), t.ThreadTS)
	if t.Permalink != "" {
		fmt.Fprintln(b, t.Permalink)
	}
	if t.ForkOf != nil {
		fmt.Fprintf(b, "Forked from %s\n", t.ForkOf)
	}
	for _, f := range t.Forks {
		fmt.Fprintf(b, "Forked into %s\n", f)
	}
	if t.EvalOf != nil {
		fmt.Fprintf(b, "What-if of %s\n", t.EvalOf)
	}
	for _, e := range t.Entries {
		b.WriteString("\n")
		switch e.Kind {
		case KindMarker:
			fmt.Fprintf(b, "[%s] · %s\n", e.TimeText, e.Marker)
			for _, n := range e.Notes {
				fmt.Fprintf(b, "  %s %s:\n", noteLabel, n.Label())
				indent(b, "    | ", n.Text)
				if n.ForgottenText != "" {
					indent(b, "    | ", "(auditor view) "+n.ForgottenText)
				}
			}
		case KindTool:
			tl := e.Tool
			fmt.Fprintf(b, "[%s] %s ran %s", e.TimeText, e.Author, tl.Name)
			if tl.Input != "" && !strings.Contains(tl.Input, "\n") {
				fmt.Fprintf(b, ": %s\n", tl.Input)
			} else {
				b.WriteString("\n")
				indent(b, "    $ ", tl.Input)
			}
			if tl.HiddenInputs > 0 {
				fmt.Fprintf(b, "    … %d more input lines\n", tl.HiddenInputs)
			}
			fmt.Fprintf(b, "  → %s\n", toolStatus(tl))
			indent(b, "    | ", tl.Output)
			if tl.HiddenLines > 0 {
				fmt.Fprintf(b, "    … %d more lines\n", tl.HiddenLines)
			}
		default:
			if e.Unposted {
				fmt.Fprintf(b, "[%s] %s %s:\n", e.TimeText, e.Author, unpostedLabel)
			} else {
				fmt.Fprintf(b, "[%s] %s:\n", e.TimeText, e.Author)
			}
			switch {
			case e.Deleted:
				indent(b, "  ", deletedLabel)
				if e.DeletedText != "" {
					indent(b, "  | ", "(auditor view) "+e.DeletedText)
				}
			case e.Edited:
				indent(b, "  ", e.Text+" "+editedLabel)
			default:
				indent(b, "  ", e.Text)
			}
			for _, f := range e.Files {
				indent(b, "  ", fileLabel+" "+oneLine(f.Name)+" "+f.describe())
			}
		}
	}
	return b.Flush()
}

// noteLabel marks a channel memory note a turn was offered, in every format.
const noteLabel = "🧠"

// fileLabel marks a file in every format.
const fileLabel = "📎"

// oneLine keeps s (a file name) on one line.
func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// toolStatus says how a tool call ended, in a few words.
func toolStatus(tl *Tool) string {
	var parts []string
	if tl.Approval != "" {
		parts = append(parts, tl.Approval) // before it ran: "approved by U…"
	}
	if !tl.HasResult {
		return strings.Join(append(parts, "no result recorded"), ", ")
	}
	switch {
	case tl.IsError:
		parts = append(parts, "error")
	case tl.ExitCode != nil && *tl.ExitCode != 0:
		parts = append(parts, "failed")
	default:
		parts = append(parts, "ok")
	}
	if tl.ExitCode != nil {
		parts = append(parts, fmt.Sprintf("exit %d", *tl.ExitCode))
	}
	if tl.DurationMS > 0 {
		parts = append(parts, fmt.Sprintf("%d ms", tl.DurationMS))
	}
	if tl.Truncated {
		parts = append(parts, "output truncated by the sandbox")
	}
	switch {
	case tl.StoppedBy != "":
		parts = append(parts, "stopped by "+tl.StoppedBy+" while it ran, outcome unknown")
	case tl.Synthetic:
		parts = append(parts, "outcome unknown (recorded after a crash)")
	}
	return strings.Join(parts, ", ")
}

// indent writes every line of s with prefix.
func indent(b *bufio.Writer, prefix, s string) {
	if s == "" {
		return
	}
	for line := range strings.SplitSeq(strings.TrimRight(s, "\n"), "\n") {
		b.WriteString(strings.TrimRight(prefix+line, " "))
		b.WriteByte('\n')
	}
}
