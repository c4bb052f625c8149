package sandbox

import (
	"fmt"
	"sync"
	"sync/atomic"
	"unicode/utf8"
)

// headTail keeps the first and last bytes of a stream written to it and
// counts the rest. It is written by one goroutine and read after that one is
// done (exec.Cmd.Wait orders both).
type headTail struct {
	headMax, tailMax int
	head, tail       []byte
	total            int64
	budget           *outputBudget
}

func newHeadTail(keep int, budget *outputBudget) *headTail {
	headMax := keep / 2
	return &headTail{headMax: headMax, tailMax: keep - headMax, budget: budget}
}

func (h *headTail) Write(p []byte) (int, error) {
	n := len(p)
	h.total += int64(n)
	if h.budget != nil {
		h.budget.add(n)
	}
	if room := h.headMax - len(h.head); room > 0 {
		k := min(room, len(p))
		h.head = append(h.head, p[:k]...)
		p = p[k:]
	}
	if len(p) == 0 || h.tailMax == 0 {
		return n, nil
	}
	if len(p) >= h.tailMax {
		h.tail = append(h.tail[:0], p[len(p)-h.tailMax:]...)
		return n, nil
	}
	h.tail = append(h.tail, p...)
	if len(h.tail) > 2*h.tailMax {
		h.tail = append(h.tail[:0], h.tail[len(h.tail)-h.tailMax:]...)
	}
	return n, nil
}

// String returns head and tail; when bytes were dropped between them, a
// "[... N bytes cut ...]" line marks the place, and truncated is true. Cuts
// are moved to UTF-8 rune boundaries so no rune is split.
func (h *headTail) result() (s string, truncated bool) {
	tail := h.tail
	if len(tail) > h.tailMax {
		tail = tail[len(tail)-h.tailMax:]
	}
	kept := int64(len(h.head) + len(tail))
	if kept == h.total {
		return string(h.head) + string(tail), false
	}
	head := h.head
	// Back off a rune split at the end of head.
	for i := 1; i <= utf8.UTFMax && i <= len(head); i++ {
		if c := head[len(head)-i]; utf8.RuneStart(c) {
			if !utf8.FullRune(head[len(head)-i:]) {
				head = head[:len(head)-i]
			}
			break
		}
	}
	// Skip continuation bytes at the start of tail.
	for i := 0; i < utf8.UTFMax && len(tail) > 0 && !utf8.RuneStart(tail[0]); i++ {
		tail = tail[1:]
	}
	cut := h.total - int64(len(head)+len(tail))
	return fmt.Sprintf("%s\n[... %d bytes cut ...]\n%s", head, cut, tail), true
}

// outputBudget counts the bytes of all streams of one command and calls
// exceeded once when they pass limit.
type outputBudget struct {
	limit    int64
	used     atomic.Int64
	once     sync.Once
	exceeded func()
}

func (b *outputBudget) add(n int) {
	if b.used.Add(int64(n)) > b.limit {
		b.once.Do(b.exceeded)
	}
}
