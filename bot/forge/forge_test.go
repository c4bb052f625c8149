package forge_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"unicode/utf8"

	"go.uber.org/goleak"

	"github.com/logbook/logbook/bot/forge"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestParseRepo(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]forge.Repo{
		"acme/api":          {Owner: "acme", Name: "api", Base: "main"},
		" acme/api@develop": {Owner: "acme", Name: "api", Base: "develop"},
		"a-b/c.d@release/1": {Owner: "a-b", Name: "c.d", Base: "release/1"},
	} {
		if got, err := forge.ParseRepo(in); err != nil || got != want {
			t.Errorf("ParseRepo(%q) = %+v, %v", in, got, err)
		}
	}
	for _, bad := range []string{"", "acme", "acme/", "/api", "acme/api/x", "acme/..", "acme/api@", "acme/api@a..b", "acme/a pi"} {
		if _, err := forge.ParseRepo(bad); err == nil {
			t.Errorf("ParseRepo(%q) accepted", bad)
		}
	}
	for _, b := range []string{"-x", "a..b", "a b", "a~1", "a^", "a:b", "x.lock", "a/", "a//b", "a@{1}", "a\\b"} {
		if forge.ValidBranch(b) {
			t.Errorf("ValidBranch(%q)", b)
		}
	}
}

// GitHub's refusals come back in its own words, with the status.
func TestGitHubError(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer tok" || r.Header.Get("X-GitHub-Api-Version") == "" {
			w.WriteHeader(401)
			return
		}
		w.WriteHeader(422)
		w.Write([]byte(`{"message":"Validation Failed","errors":[{"message":"No commits between main and fix"}]}`))
	}))
	defer srv.Close()
	g := forge.NewGitHub(srv.URL, "tok", nil)
	_, err := g.CreatePull(context.Background(), forge.Repo{Owner: "acme", Name: "api", Base: "main"}, "fix", "t", "b")
	var fe *forge.Error
	if !errors.As(err, &fe) || fe.Status != 422 || fe.Message != "Validation Failed; No commits between main and fix" {
		t.Fatalf("error %v", err)
	}
}

// A long refusal is cut for the error without splitting a character.
func TestGitHubErrorCutKeepsCharactersWhole(t *testing.T) {
	t.Parallel()
	long := "x" + strings.Repeat("é", 400) // 801 bytes: byte 300 falls inside an é
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(422)
		w.Write([]byte(`{"message":"` + long + `"}`))
	}))
	defer srv.Close()
	g := forge.NewGitHub(srv.URL, "tok", nil)
	_, err := g.CreatePull(context.Background(), forge.Repo{Owner: "acme", Name: "api", Base: "main"}, "fix", "t", "b")
	var fe *forge.Error
	if !errors.As(err, &fe) {
		t.Fatalf("error %v", err)
	}
	if !utf8.ValidString(fe.Message) || len(fe.Message) > 300 || !strings.HasPrefix(fe.Message, "xéé") {
		t.Fatalf("message %q (%d bytes): want the start of GitHub's, valid UTF-8, at most 300 bytes", fe.Message, len(fe.Message))
	}
}
