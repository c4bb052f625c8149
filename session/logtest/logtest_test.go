package logtest_test

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/logbook/logbook/session/logtest"
)

// Writers on several goroutines and a reader at once (the race detector watches): every
// line arrives whole.
func TestBufferTakesConcurrentWrites(t *testing.T) {
	t.Parallel()
	var b logtest.Buffer
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := range 50 {
				fmt.Fprintf(&b, "writer %d line %d\n", w, i)
			}
		})
	}
	wg.Go(func() {
		for range 50 {
			_ = b.String()
		}
	})
	wg.Wait()
	lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	if len(lines) != 200 {
		t.Fatalf("%d lines, want 200", len(lines))
	}
	for w := range 4 {
		for i := range 50 {
			if want := fmt.Sprintf("writer %d line %d", w, i); !slices.Contains(lines, want) {
				t.Errorf("line %q missing", want)
			}
		}
	}
}
