package sandbox

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails a passing run that leaves goroutines behind (a command's output copier or
// waiter still running after the command's deadline, say).
func TestMain(m *testing.M) {
	MaybeForward(os.Args) // the egress tests' sandboxes run this binary as their forwarder
	goleak.VerifyTestMain(m)
}
