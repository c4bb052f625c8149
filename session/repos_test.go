package session_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/logbook/logbook/session"
)

// A channel's repository is its newest row; rows are a record: the application role may add
// one, nobody may change or remove one.
func TestChannelRepoIsARecord(t *testing.T) {
	t.Parallel()
	st, pool, dbURL := newStorePool(t, 2)
	ctx := context.Background()
	if _, err := st.ChannelRepo(ctx, "C0001"); !errors.Is(err, session.ErrNotFound) {
		t.Fatalf("never set: %v", err)
	}
	for _, r := range []session.ChannelRepo{
		{Team: "T1", Channel: "C0001", URL: "https://github.com/acme/api.git", Branch: "main", SetBy: "U1"},
		{Team: "T1", Channel: "C0001", URL: "https://github.com/acme/web.git", SetBy: "U2"},
		{Team: "T1", Channel: "C0002", URL: "", SetBy: "U1"},
	} {
		if _, err := st.SetChannelRepo(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	got, err := st.ChannelRepo(ctx, "C0001")
	if err != nil || got.URL != "https://github.com/acme/web.git" || got.Branch != "" || got.SetBy != "U2" || got.SetAt.IsZero() {
		t.Fatalf("newest: %+v %v", got, err)
	}
	if off, err := st.ChannelRepo(ctx, "C0002"); err != nil || off.URL != "" {
		t.Fatalf("switched off: %+v %v", off, err)
	}
	if _, err := st.SetChannelRepo(ctx, session.ChannelRepo{Team: "T1", Channel: "C0001", URL: "x"}); !errors.Is(err, session.ErrInvalidEvent) {
		t.Fatalf("without who set it: %v", err)
	}
	for _, q := range []string{`UPDATE channel_repos SET url = ''`, `DELETE FROM channel_repos`} {
		if _, err := pool.Exec(ctx, q); err == nil {
			t.Fatalf("%s as the application role succeeded", q)
		}
		if _, err := superuser(t, dbURL).Exec(ctx, q); err == nil || !strings.Contains(err.Error(), "append-only") {
			t.Fatalf("%s as a superuser: %v", q, err)
		}
	}
}
