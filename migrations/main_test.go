package migrations_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails a passing run that leaves goroutines behind (a connection of a replica, say).
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
