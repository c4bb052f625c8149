package session_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/logbook/logbook/session"
)

// A call with no budget to fit in is admitted without waiting on a budget's lock: while
// another transaction holds the person's and the channel's locks (an admission of a budgeted
// call in flight), the unbudgeted admission still returns, and its hold is written. Before,
// every admission took both locks, so one busy person's calls were serialised across every
// replica even with no budget at all.
func TestAdmitSpendWithoutLimitsTakesNoLock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, dbURL := newStore(t)
	admin := superuser(t, dbURL)
	sess, err := st.Open(ctx, session.ThreadKey{Team: "T1", Channel: "C1", ThreadTS: "1.000001"})
	if err != nil {
		t.Fatal(err)
	}
	day := session.UTCDay(time.Now())
	tx, err := admin.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	for _, key := range []int64{session.SpendLock("channel", "C1", day), session.SpendLock("person", "U1", day)} {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, key); err != nil {
			t.Fatal(err)
		}
	}
	hold := session.Spend{CallID: uuid.Must(uuid.NewV7()), Day: day, Channel: "C1", Person: "U1", SessionID: sess.ID,
		Turn: 1, Purpose: "turn", Provider: "anthropic", Model: "m", CostMicros: 10}
	// Bounded: with the locks taken, it would wait for the holder's transaction to end.
	wait, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	tot, ok, err := st.AdmitSpend(wait, hold, session.SpendLimits{Channel: -1, Person: -1})
	if err != nil || !ok {
		t.Fatalf("admit with no budget while the budgets' locks are held: admitted %v, %v", ok, err)
	}
	if tot != (session.SpendTotals{}) {
		t.Errorf("totals %+v, want none read", tot)
	}
	spent, err := st.Spent(ctx, "C1", "U1", day)
	if err != nil {
		t.Fatal(err)
	}
	if spent.Channel != 10 || spent.Person != 10 {
		t.Errorf("spent %+v after the hold, want 10 for the channel and the person", spent)
	}
}
