package session_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests when a goroutine outlives them (a listener, a pool's
// background work, a helper appender left running).
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
