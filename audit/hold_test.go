package audit_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/logbook/logbook/audit"
	"github.com/logbook/logbook/session"
)

// A hold names something the log has, or fails naming what it did not find (issue 29: a
// mistyped session id was held, holding nothing, and the session meant could be purged).
func TestHoldNamesWhatExists(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	s := f.open(t, "C0000001", "1700000000.000100")
	f.append(t, s.ID, alice, session.TypeUserMessage, map[string]any{"text": "hi"})
	who := audit.Who{Name: "legal@example.com"}
	missing := "0195503a-4f00-7000-8000-0000000000ff"
	for _, c := range []struct {
		scope       audit.HoldScope
		value, miss string
	}{
		{audit.HoldSession, s.ID.String(), missing},
		{audit.HoldChannel, "C0000001", "C0000009"},
		{audit.HoldActor, alice.ID, "U0000TYPO"},
	} {
		if _, err := audit.AddHold(ctx, f.auditorPool, who, c.scope, c.value, "litigation"); err != nil {
			t.Errorf("hold on %s %s, which exists: %v", c.scope, c.value, err)
		}
		_, err := audit.AddHold(ctx, f.auditorPool, who, c.scope, c.miss, "litigation")
		if !errors.Is(err, audit.ErrNotFound) || !strings.Contains(err.Error(), c.miss) || !strings.Contains(err.Error(), string(c.scope)) {
			t.Errorf("hold on %s %s, which the log does not have: %v; want ErrNotFound naming it", c.scope, c.miss, err)
		}
	}
	hs, err := audit.Holds(ctx, f.auditorPool)
	if err != nil {
		t.Fatal(err)
	}
	if len(hs) != 3 {
		t.Errorf("open holds: %+v; want the three that name something", hs)
	}
	// --reason stays required, and says so before any lookup.
	if _, err := audit.AddHold(ctx, f.auditorPool, who, audit.HoldSession, missing, " "); !errors.Is(err, audit.ErrInvalid) {
		t.Errorf("hold without a reason: %v; want ErrInvalid", err)
	}
}
