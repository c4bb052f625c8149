package bot_test

import (
	"flag"
	"os"
	"runtime"
	"strconv"
	"testing"

	"go.uber.org/goleak"

	"github.com/logbook/logbook/sandbox"
)

// TestMain runs the tests more in parallel than go test's default, and fails a passing run
// that leaves goroutines behind: every goroutine the bot starts has an owner that waits for
// it, and the tests stop what they start.
//
// The default, -parallel GOMAXPROCS, suits CPU-bound tests; these mostly wait (on Slack's
// ack windows and Retry-After, a lease, a poll), each on its own emulator and database, so
// four per CPU finish in half the time without more CPU. An explicit -parallel wins.
func TestMain(m *testing.M) {
	sandbox.MaybeForward(os.Args) // bwrap sandboxes with an egress run this binary as their forwarder
	flag.Parse()
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "test.parallel" })
	if !set {
		_ = flag.Set("test.parallel", strconv.Itoa(4*runtime.GOMAXPROCS(0)))
	}
	goleak.VerifyTestMain(m)
}
