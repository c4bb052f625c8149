package transcript

import (
	"bufio"
	"cmp"
	"fmt"
	"io"
	"strings"
)

func (t *Transcript) writeMarkdown(w io.Writer) error {
	b := bufio.NewWriter(w)
	fmt.Fprintf(b, "# %s\n\n", mdEscapeLine(t.Heading()))
	fmt.Fprintf(b, "- Session: `%s`\n", t.SessionID)
	if t.Permalink != "" {
		fmt.Fprintf(b, "- Thread: [#%s %s](%s)\n", t.ChannelLabel(), t.ThreadTS, t.Permalink)
	} else {
		fmt.Fprintf(b, "- Thread: #%s %s\n", t.ChannelLabel(), t.ThreadTS)
	}
	if t.ForkOf != nil {
		fmt.Fprintf(b, "- Forked from %s\n", mdEscapeLine(t.ForkOf.String()))
	}
	for _, f := range t.Forks {
		fmt.Fprintf(b, "- Forked into %s\n", mdEscapeLine(f.String()))
	}
	if t.EvalOf != nil {
		fmt.Fprintf(b, "- What-if of %s\n", mdEscapeLine(t.EvalOf.String()))
	}
	for _, e := range t.Entries {
		b.WriteString("\n")
		switch e.Kind {
		case KindMarker:
			fmt.Fprintf(b, "> _%s · %s_\n", e.TimeText, mdEscapeLine(e.Marker))
			for _, n := range e.Notes {
				fmt.Fprintf(b, ">\n> %s %s\n", noteLabel, mdEscapeLine(n.Label()))
				if text := cmp.Or(n.Text, n.ForgottenText); text != "" {
					if n.ForgottenText != "" {
						b.WriteString(">\n> auditor view: what the forgotten note said\n")
					}
					b.WriteString(">\n")
					mdQuoteFence(b, text)
				}
			}
		case KindTool:
			tl := e.Tool
			fmt.Fprintf(b, "**🔧 %s** · %s\n\n", mdEscapeLine(tl.Name), e.TimeText)
			if tl.Input != "" {
				mdFence(b, "", tl.Input)
				if tl.HiddenInputs > 0 {
					fmt.Fprintf(b, "_… %d more input lines_\n", tl.HiddenInputs)
				}
				b.WriteString("\n")
			}
			fmt.Fprintf(b, "→ %s\n", toolStatus(tl))
			if tl.Output != "" {
				b.WriteString("\n")
				mdFence(b, "", tl.Output)
			}
			if tl.HiddenLines > 0 {
				fmt.Fprintf(b, "\n_… %d more lines_\n", tl.HiddenLines)
			}
		default:
			if e.Unposted {
				fmt.Fprintf(b, "**%s** %s · %s\n\n", mdEscapeLine(e.Author), unpostedLabel, e.TimeText)
			} else {
				fmt.Fprintf(b, "**%s** · %s\n\n", mdEscapeLine(e.Author), e.TimeText)
			}
			switch {
			case e.Deleted:
				fmt.Fprintf(b, "_%s_\n", deletedLabel)
				if e.DeletedText != "" {
					b.WriteString("\n> auditor view: what the deleted message said\n>\n")
					for line := range strings.SplitSeq(e.DeletedText, "\n") {
						fmt.Fprintf(b, "> %s\n", line)
					}
				}
			case e.Edited:
				text := strings.TrimRight(e.Text, "\n")
				if strings.HasSuffix(text, "```") { // a closing fence must end its line
					text += "\n"
				}
				fmt.Fprintf(b, "%s _%s_\n", text, editedLabel)
			case e.Text == "" && len(e.Files) > 0:
			default:
				fmt.Fprintf(b, "%s\n", strings.TrimRight(e.Text, "\n"))
			}
			if len(e.Files) > 0 && (e.Text != "" || e.Deleted) {
				b.WriteString("\n")
			}
			for _, f := range e.Files {
				name := mdEscapeLine(oneLine(f.Name))
				if f.URL != "" {
					name = "[" + name + "](<" + f.URL + ">)"
				}
				fmt.Fprintf(b, "- %s %s %s\n", fileLabel, name, mdEscapeLine(f.describe()))
			}
		}
	}
	return b.Flush()
}

// mdFence writes s in a code fence longer than any run of backticks inside it.
func mdFence(b *bufio.Writer, lang, s string) {
	fence := "```"
	for strings.Contains(s, fence) {
		fence += "`"
	}
	fmt.Fprintf(b, "%s%s\n%s\n%s\n", fence, lang, strings.TrimRight(s, "\n"), fence)
}

// mdQuoteFence writes s as a code block inside a block quote: a note's text is shown as it
// was written, no Markdown of its own taking effect.
func mdQuoteFence(b *bufio.Writer, s string) {
	fence := "```"
	for strings.Contains(s, fence) {
		fence += "`"
	}
	fmt.Fprintf(b, "> %s\n", fence)
	for line := range strings.SplitSeq(strings.TrimRight(s, "\n"), "\n") {
		fmt.Fprintf(b, "> %s\n", line)
	}
	fmt.Fprintf(b, "> %s\n", fence)
}

var mdLine = strings.NewReplacer("\n", " ", "*", `\*`, "_", `\_`, "`", "\\`", "[", `\[`, "]", `\]`, "<", `\<`)

// mdEscapeLine makes s safe as inline Markdown on one line.
func mdEscapeLine(s string) string { return mdLine.Replace(s) }
