package audit_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests when a goroutine outlives them (a scheduler's job, a
// chain worker, a pool's background work).
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
