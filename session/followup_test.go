package session_test

import (
	"context"
	"crypto/sha256"
	"testing"
	"time"
)

// A webhook delivery is claimed once by its id and once by its body until it expires; a
// released claim is taken again (migration 00095).
func TestClaimDelivery(t *testing.T) {
	t.Parallel()
	st, pool, _ := newStorePool(t, 2)
	ctx := context.Background()
	body := sha256.Sum256([]byte(`{"action":"completed"}`))
	other := sha256.Sum256([]byte(`{"action":"submitted"}`))
	claim := func(id string, hash [32]byte, ttl time.Duration) bool {
		t.Helper()
		ok, err := st.ClaimDelivery(ctx, id, hash[:], ttl)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	if !claim("d-1", body, time.Hour) {
		t.Fatal("a first delivery is not claimed")
	}
	if claim("d-1", body, time.Hour) || claim("d-2", body, time.Hour) || claim("d-1", other, time.Hour) {
		t.Fatal("the same id, or the same body under a new id, claimed twice")
	}
	if err := st.ReleaseDelivery(ctx, "d-1"); err != nil {
		t.Fatal(err)
	}
	if !claim("d-1", body, time.Hour) {
		t.Fatal("a released delivery is not claimed again")
	}
	// Expired: claimed again, the old row pruned.
	if !claim("d-3", other, -time.Second) || !claim("d-4", other, time.Hour) {
		t.Fatal("an expired claim still holds")
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM github_deliveries`).Scan(&n); err != nil || n != 2 {
		t.Fatalf("%d rows (%v), want 2: the expired one pruned", n, err)
	}
}

// At most one look per pull request per gap: the first is due at once, the next after the
// gap, and one asked for while that is still to start is covered by it.
func TestClaimLook(t *testing.T) {
	t.Parallel()
	st, _ := newStoreTB(t, 2)
	ctx := context.Background()
	gap := time.Hour
	wait, due, err := st.ClaimLook(ctx, "acme/api", 1, gap)
	if err != nil || !due || wait != 0 {
		t.Fatalf("first: wait %v due %v, %v", wait, due, err)
	}
	wait, due, err = st.ClaimLook(ctx, "acme/api", 1, gap)
	if err != nil || !due || wait < 59*time.Minute || wait > gap {
		t.Fatalf("second: wait %v due %v, %v; want about the gap", wait, due, err)
	}
	if _, due, err = st.ClaimLook(ctx, "acme/api", 1, gap); err != nil || due {
		t.Fatalf("third: due %v, %v; want covered by the second", due, err)
	}
	if wait, due, err = st.ClaimLook(ctx, "acme/api", 2, gap); err != nil || !due || wait != 0 {
		t.Fatalf("another pull request: wait %v due %v, %v", wait, due, err)
	}
}
