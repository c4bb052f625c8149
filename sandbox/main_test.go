package sandbox

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails a passing run that leaves goroutines behind (a command's output copier or
// waiter still running after the command's deadline, say).
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
