package connectors_test

import (
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/logbook/logbook/sandbox"
)

// TestMain fails the package's tests when a goroutine outlives them (a client session, a
// local server's waiter, an HTTP connection left open); it also serves as the sandbox's
// egress forwarder when bwrap runs this binary as one.
func TestMain(m *testing.M) {
	sandbox.MaybeForward(os.Args)
	maybeServeStdio()
	goleak.VerifyTestMain(m)
}
