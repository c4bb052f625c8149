package slackemu

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"
)

// TestMain fails the run if any goroutine started by this package (or by its
// test clients) outlives the tests: Close must wait for all of them.
func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		if leaked := lingering(); leaked != "" {
			fmt.Fprintf(os.Stderr, "goroutines left after Close:\n%s\n", leaked)
			code = 1
		}
	}
	os.Exit(code)
}

// lingering returns the stacks of this package's goroutines still alive, giving
// exiting goroutines up to 5s to finish.
func lingering() string {
	var left []string
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		left = left[:0]
		for _, g := range strings.Split(string(buf), "\n\n") {
			if strings.Contains(g, "bot/slackemu.") && !strings.Contains(g, "slackemu.TestMain") && !strings.Contains(g, "slackemu.lingering") {
				left = append(left, g)
			}
		}
		if len(left) == 0 {
			return ""
		}
	}
	return strings.Join(left, "\n\n")
}
