package repo_test

import (
	"context"
	"testing"

	"go.uber.org/goleak"

	"github.com/logbook/logbook/bot/repo"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// LOGBOOK_REPOS names a repository per channel and one for every other; a channel id that is
// not one, or a repository that is not owner/name, is refused.
func TestParseStaticAndFor(t *testing.T) {
	t.Parallel()
	s, err := repo.ParseStatic(" C0123=acme/api@main , *=acme/docs ")
	if err != nil {
		t.Fatal(err)
	}
	c := &repo.Channels{Static: s}
	r, ok, err := c.For(context.Background(), "T1", "C0123")
	if err != nil || !ok || r.URL != "https://github.com/acme/api.git" || r.Branch != "main" || !r.OnForge {
		t.Fatalf("C0123: %+v %v %v", r, ok, err)
	}
	if f, ok, _ := c.OnForge(context.Background(), "T1", "C9999"); !ok || f.String() != "acme/docs" {
		t.Fatalf("every other channel: %v %v", f, ok)
	}
	for _, bad := range []string{"general=acme/api", "C0123=acme", "=acme/api"} {
		if _, err := repo.ParseStatic(bad); err == nil {
			t.Errorf("ParseStatic(%q) took it", bad)
		}
	}
	var none *repo.Channels
	if _, ok, err := none.For(context.Background(), "T1", "C0123"); ok || err != nil {
		t.Fatalf("nil Channels: %v %v", ok, err)
	}
}
