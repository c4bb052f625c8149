package bot_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails a passing run that leaves goroutines behind: every goroutine the bot starts
// has an owner that waits for it, and the tests stop what they start.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
