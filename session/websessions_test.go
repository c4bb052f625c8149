package session_test

import (
	"context"
	"crypto/sha256"
	"errors"
	"testing"
	"time"

	"github.com/logbook/logbook/session"
)

// A web session is found by its id's hash until it expires or ends; creating one deletes the
// expired ones; the application role may do all of it.
func TestWebSessionsExpireAndEnd(t *testing.T) {
	t.Parallel()
	st, pool, _ := newStorePool(t, 2)
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Microsecond)
	a := session.WebSession{IDHash: sha256.Sum256([]byte("cookie-a")), Who: "ci-bot", TokenMAC: sha256.Sum256([]byte("mac")),
		CreatedAt: now, ExpiresAt: now.Add(time.Hour)}
	if err := st.CreateWebSession(ctx, a); err != nil {
		t.Fatal(err)
	}
	got, err := st.WebSession(ctx, a.IDHash, now.Add(time.Minute))
	if err != nil || got.Who != "ci-bot" || got.TokenMAC != a.TokenMAC || !got.ExpiresAt.Equal(a.ExpiresAt) {
		t.Fatalf("WebSession = %+v, %v", got, err)
	}
	if _, err := st.WebSession(ctx, a.IDHash, now.Add(time.Hour)); !errors.Is(err, session.ErrNotFound) {
		t.Errorf("at its expiry: %v, want ErrNotFound", err)
	}
	if _, err := st.WebSession(ctx, sha256.Sum256([]byte("other")), now); !errors.Is(err, session.ErrNotFound) {
		t.Errorf("unknown id: %v, want ErrNotFound", err)
	}
	// A session created after a's expiry deletes a.
	b := session.WebSession{IDHash: sha256.Sum256([]byte("cookie-b")), Who: "ci-bot", CreatedAt: now.Add(2 * time.Hour), ExpiresAt: now.Add(3 * time.Hour)}
	if err := st.CreateWebSession(ctx, b); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM web_sessions`).Scan(&n); err != nil || n != 1 {
		t.Errorf("%d rows after the expired one's cleanup (%v), want 1", n, err)
	}
	if ended, err := st.EndWebSession(ctx, b.IDHash); err != nil || !ended {
		t.Fatalf("EndWebSession = %v, %v", ended, err)
	}
	if _, err := st.WebSession(ctx, b.IDHash, b.CreatedAt); !errors.Is(err, session.ErrNotFound) {
		t.Errorf("after it ended: %v, want ErrNotFound", err)
	}
	if ended, err := st.EndWebSession(ctx, b.IDHash); err != nil || ended {
		t.Errorf("ending it again = %v, %v; want false", ended, err)
	}
	for _, bad := range []session.WebSession{{IDHash: a.IDHash, CreatedAt: now, ExpiresAt: now.Add(time.Hour)}, {IDHash: a.IDHash, Who: "x", CreatedAt: now, ExpiresAt: now}} {
		if err := st.CreateWebSession(ctx, bad); !errors.Is(err, session.ErrInvalidEvent) {
			t.Errorf("CreateWebSession(%+v) = %v, want ErrInvalidEvent", bad, err)
		}
	}
}
