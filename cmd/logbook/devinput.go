package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"strings"
	"time"
	"unicode/utf8"
)

// How the dev chat turns terminal input into messages, like Slack's composer: a multi-line
// paste is one message, and a message longer than Slack takes is refused with a note.
const (
	// slackMaxChars is the most characters Slack takes in one message.
	slackMaxChars = 40_000
	// ttyLineMax is the most bytes a terminal in canonical mode passes on in one line (Linux's
	// N_TTY buffer is 4096 bytes, the newline included); it drops the rest silently.
	ttyLineMax = 4095
	// pasteWindow: on a terminal, lines arriving within this of each other are one paste.
	pasteWindow = 25 * time.Millisecond
	// fence on a line of its own starts and ends an explicit multi-line message.
	fence = `"""`
)

// input is one message or command typed into the chat.
type input struct {
	text string
	note string // set: text is not sent; say this instead
	hint string // set: nothing is sent yet; say this (the message goes on, on the next lines)
}

// writeHint is said when a line `write: PATH` comes alone: the lines after it are its content.
const writeHint = `(write: the lines you type next are the file's content; a line of """ ends them and sends the message)`

// loneWrite reports whether msg is the offline model's `write: PATH` directive alone, its
// content yet to come.
func loneWrite(msg []string) bool {
	if len(msg) != 1 {
		return false
	}
	rest, ok := strings.CutPrefix(strings.ToLower(strings.TrimSpace(msg[0])), "write:")
	return ok && strings.TrimSpace(rest) != ""
}

// readInputs reads in until it ends and sends what was typed on the channel it returns,
// closing it at the end (or when ctx is done). Lines between two `"""` lines are one
// message. With window > 0 (a terminal), lines that arrive within window of each other are
// one message too — a paste — and a line of ttyLineMax bytes, which the terminal has
// probably cut, is refused. A message of more than slackMaxChars characters is refused.
// With writes (the offline model), a line `write: PATH` that comes alone takes the lines
// after it, up to a `"""` line, as the file's content: one message, as the directive wants.
func readInputs(ctx context.Context, in io.Reader, window time.Duration, writes bool) <-chan input {
	lines := make(chan string)
	go func() { // ends with in (stdin cannot be interrupted); the chat does not wait for it
		defer close(lines)
		r := bufio.NewReader(in)
		for {
			line, err := r.ReadString('\n')
			if line != "" || err == nil {
				select {
				case lines <- strings.TrimSuffix(strings.TrimSuffix(line, "\n"), "\r"):
				case <-ctx.Done():
					return
				}
			}
			if err != nil {
				return
			}
		}
	}()
	out := make(chan input)
	go func() {
		defer close(out)
		send := func(in input) bool {
			select {
			case out <- in:
				return true
			case <-ctx.Done():
				return false
			}
		}
		for {
			line, ok := <-lines
			if !ok {
				return
			}
			var msg []string
			switch {
			case strings.TrimSpace(line) == fence:
				for line = range lines {
					if strings.TrimSpace(line) == fence {
						break
					}
					msg = append(msg, line)
				}
			case window > 0:
				msg = append(msg, line)
				timer := time.NewTimer(window)
			paste:
				for {
					select {
					case next, ok := <-lines:
						if !ok {
							break paste
						}
						msg = append(msg, next)
						timer.Reset(window)
					case <-timer.C:
						break paste
					}
				}
				timer.Stop()
			default:
				msg = []string{line}
			}
			if writes && loneWrite(msg) {
				if !send(input{hint: writeHint}) {
					return
				}
				for line = range lines {
					if strings.TrimSpace(line) == fence {
						break
					}
					msg = append(msg, line)
				}
			}
			if !send(checkInput(msg, window > 0)) {
				return
			}
		}
	}()
	return out
}

// checkInput joins the lines of one message and refuses what Slack or the terminal would cut.
func checkInput(lines []string, tty bool) input {
	text := strings.TrimSpace(strings.Join(lines, "\n"))
	if n := utf8.RuneCountInString(text); n > slackMaxChars {
		return input{text: text, note: fmt.Sprintf("(not sent: %d characters; Slack takes at most 40,000 in one message — split it)", n)}
	}
	if tty {
		for _, l := range lines {
			if len(l) == ttyLineMax {
				return input{text: text, note: "(not sent: a line of 4,095 bytes is the most a terminal passes on, so it probably cut this one; " +
					"send long text with /send FILE, or pipe it into logbook dev between \"\"\" lines)"}
			}
		}
	}
	return input{text: text}
}
