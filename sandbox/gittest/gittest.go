// Package gittest serves throwaway git repositories over HTTP for tests: a real git
// http-backend behind net/http/cgi on loopback, as a forge would serve them.
package gittest

import (
	"bytes"
	"io"
	"net/http"
	"net/http/cgi"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// Options say what ServeWith serves.
type Options struct {
	// Path is the repository's path on the server ("repo.git", "acme/api.git").
	Path string
	// Files are the first commit's files, on branch main.
	Files map[string]string
	// Push lets anyone push (http.receivepack).
	Push bool
	// Auth, if set, is the Authorization header every request must carry (401 otherwise).
	Auth string
}

// Server is a served repository.
type Server struct {
	// URL is the repository's URL; Base the server's.
	URL, Base string
	// Commit is the head of main at start.
	Commit string
	// Bare is the repository's directory, for git commands of the test's own.
	Bare string

	git  func(dir string, args ...string) string
	mu   sync.Mutex
	auth []string
}

// Authorizations returns the Authorization header of every request so far ("" for none).
func (s *Server) Authorizations() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.auth...)
}

// Branch returns the commit branch points to, "" when there is no such branch.
func (s *Server) Branch(name string) string {
	cmd := exec.Command("git", "rev-parse", "--verify", "--quiet", "refs/heads/"+name)
	cmd.Dir = s.Bare
	cmd.Env = []string{"PATH=/usr/bin:/bin", "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null"}
	out, err := cmd.Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

// Git runs git in the bare repository and returns its trimmed output.
func (s *Server) Git(args ...string) string { return s.git(s.Bare, args...) }

// Serve serves a new repository holding files at path (e.g. "repo.git", "acme/api.git")
// until the test ends, and returns the server's base URL and the repository's head commit.
// The repository's URL is base + "/" + path. It fails the test when git is missing.
func Serve(tb testing.TB, path string, files map[string]string) (base, commit string) {
	tb.Helper()
	s := ServeWith(tb, Options{Path: path, Files: files})
	return s.Base, s.Commit
}

// ServeWith serves a new repository as opt says until the test ends.
func ServeWith(tb testing.TB, opt Options) *Server {
	tb.Helper()
	path, files := opt.Path, opt.Files
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
		if err := os.MkdirAll(filepath.Dir(filepath.Join(work, name)), 0o755); err != nil { // a file in a directory
			tb.Fatal(err)
		}
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
	if opt.Push {
		run(bare, "config", "http.receivepack", "true")
	}
	s := &Server{Bare: bare, Commit: run(work, "rev-parse", "HEAD"), git: run}
	backend := &cgi.Handler{Path: gitBin, Args: []string{"http-backend"}, Dir: root,
		Env: []string{"GIT_PROJECT_ROOT=" + root, "GIT_HTTP_EXPORT_ALL=1", "GIT_CONFIG_NOSYSTEM=1", "HOME=" + root}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got := r.Header.Get("Authorization")
		s.mu.Lock()
		s.auth = append(s.auth, got)
		s.mu.Unlock()
		if opt.Auth != "" && got != opt.Auth {
			w.Header().Set("WWW-Authenticate", `Basic realm="gittest"`)
			http.Error(w, "authentication required", http.StatusUnauthorized)
			return
		}
		if r.ContentLength < 0 && r.Body != nil {
			// net/http/cgi refuses chunked bodies (git sends large pushes chunked): buffer.
			body, err := io.ReadAll(r.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
			r.Header.Del("Transfer-Encoding")
			r.TransferEncoding = nil
		}
		backend.ServeHTTP(w, r)
	}))
	tb.Cleanup(srv.Close)
	s.Base, s.URL = srv.URL, srv.URL+"/"+path
	return s
}
