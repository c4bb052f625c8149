// Package gittest serves throwaway git repositories over HTTP for tests: a real git
// http-backend behind net/http/cgi on loopback, as a forge would serve them.
package gittest

import (
	"net/http/cgi"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Serve serves a new repository holding files at path (e.g. "repo.git", "acme/api.git")
// until the test ends, and returns the server's base URL and the repository's head commit.
// The repository's URL is base + "/" + path. It fails the test when git is missing.
func Serve(tb testing.TB, path string, files map[string]string) (base, commit string) {
	tb.Helper()
	gitBin, err := exec.LookPath("git")
	if err != nil {
		tb.Fatal("git is needed (apt-get install git); .ci/run installs it")
	}
	root := tb.TempDir()
	work := filepath.Join(root, "work")
	run := func(dir string, args ...string) string {
		cmd := exec.Command(gitBin, args...)
		cmd.Dir = dir
		cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + root, "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null",
			"GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com"}
		out, err := cmd.CombinedOutput()
		if err != nil {
			tb.Fatalf("git %v: %v: %s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	if err := os.MkdirAll(work, 0o755); err != nil {
		tb.Fatal(err)
	}
	run(work, "init", "-q", "-b", "main")
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(work, name), []byte(body), 0o644); err != nil {
			tb.Fatal(err)
		}
	}
	run(work, "add", "-A")
	run(work, "commit", "-q", "-m", "first")
	bare := filepath.Join(root, filepath.FromSlash(path))
	if err := os.MkdirAll(filepath.Dir(bare), 0o755); err != nil {
		tb.Fatal(err)
	}
	run(root, "clone", "-q", "--bare", work, bare)
	srv := httptest.NewServer(&cgi.Handler{Path: gitBin, Args: []string{"http-backend"}, Dir: root,
		Env: []string{"GIT_PROJECT_ROOT=" + root, "GIT_HTTP_EXPORT_ALL=1", "GIT_CONFIG_NOSYSTEM=1", "HOME=" + root}})
	tb.Cleanup(srv.Close)
	return srv.URL, run(work, "rev-parse", "HEAD")
}
