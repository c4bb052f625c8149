package sandbox

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"net/http/cgi"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/logbook/logbook/session/logtest"
)

func requireGit(tb testing.TB) string {
	tb.Helper()
	git, err := exec.LookPath("git")
	if err != nil {
		tb.Skip("SKIPPING REPOSITORY TEST: git is not installed (apt-get install git); repository checkout is NOT being tested")
	}
	return git
}

// gitServer is a bare repository served by git http-backend on loopback,
// refusing requests without its Authorization header, and a work repository
// whose commits push() sends to it.
type gitServer struct {
	URL, Header string
	bare, work  string
	authorized  atomic.Int64
	refused     atomic.Int64
}

const testToken = "s3cr3t-t0ken-never-on-disk"

// hostGitT runs the test's own git (not the package's) in dir.
func hostGitT(tb testing.TB, dir string, args ...string) string {
	tb.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = []string{"PATH=" + defaultPath, "HOME=" + dir, "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null",
		"GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com"}
	out, err := cmd.CombinedOutput()
	if err != nil {
		tb.Fatalf("git %v: %v: %s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

func newGitServer(tb testing.TB, files map[string][]byte) *gitServer {
	tb.Helper()
	git := requireGit(tb)
	root := tb.TempDir()
	gs := &gitServer{Header: "Authorization: Bearer " + testToken, bare: filepath.Join(root, "repo.git"), work: filepath.Join(root, "work")}
	if err := os.Mkdir(gs.work, 0o755); err != nil {
		tb.Fatal(err)
	}
	hostGitT(tb, gs.work, "init", "-q", "-b", "main")
	hostGitT(tb, gs.work, "config", "core.compression", "0")
	gs.commit(tb, files, "first")
	hostGitT(tb, root, "clone", "-q", "--bare", gs.work, gs.bare)
	hostGitT(tb, gs.work, "remote", "add", "origin", gs.bare)
	backend := &cgi.Handler{Path: git, Args: []string{"http-backend"}, Dir: root,
		Env: []string{"GIT_PROJECT_ROOT=" + root, "GIT_HTTP_EXPORT_ALL=1", "GIT_CONFIG_NOSYSTEM=1", "HOME=" + root}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+testToken {
			gs.refused.Add(1)
			w.Header().Set("WWW-Authenticate", `Bearer realm="test"`)
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		gs.authorized.Add(1)
		backend.ServeHTTP(w, r)
	}))
	tb.Cleanup(srv.Close)
	gs.URL = srv.URL + "/repo.git"
	return gs
}

// commit writes files into the work repository and commits them.
func (gs *gitServer) commit(tb testing.TB, files map[string][]byte, msg string) string {
	tb.Helper()
	for name, data := range files {
		path := filepath.Join(gs.work, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			tb.Fatal(err)
		}
		if err := os.WriteFile(path, data, 0o644); err != nil {
			tb.Fatal(err)
		}
	}
	hostGitT(tb, gs.work, "add", "-A")
	hostGitT(tb, gs.work, "commit", "-q", "-m", msg)
	return hostGitT(tb, gs.work, "rev-parse", "HEAD")
}

func (gs *gitServer) push(tb testing.TB, files map[string][]byte, msg string) string {
	tb.Helper()
	c := gs.commit(tb, files, msg)
	hostGitT(tb, gs.work, "push", "-q", "origin", "main")
	return c
}

// assertNoSecret fails if any file under dir holds the token.
func assertNoSecret(tb testing.TB, dir string) {
	tb.Helper()
	n := 0
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		n++
		if bytes.Contains(data, []byte(testToken)) {
			tb.Errorf("%s holds the header's token", path)
		}
		return nil
	})
	if err != nil {
		tb.Fatal(err)
	}
	if n == 0 {
		tb.Fatalf("no files under %s", dir)
	}
}

func TestRepoMirrorsCloneThenFetch(t *testing.T) {
	t.Parallel()
	gs := newGitServer(t, map[string][]byte{"README": []byte("one\n")})
	first := hostGitT(t, gs.work, "rev-parse", "HEAD")
	logs := &logtest.Buffer{}
	dir := filepath.Join(t.TempDir(), "mirrors")
	m := NewMirrors(dir, zerolog.New(logs).Level(zerolog.DebugLevel))
	ctx := context.Background()

	if _, _, err := m.Checkout(ctx, gs.URL, "main", ""); err == nil {
		t.Fatal("Checkout without the header succeeded; the server answers 401")
	}
	if gs.refused.Load() == 0 {
		t.Fatal("server saw no unauthorized request")
	}
	commit, src, err := m.Checkout(ctx, gs.URL, "main", gs.Header)
	if err != nil {
		t.Fatal(err)
	}
	if commit != first {
		t.Fatalf("commit %s, want %s", commit, first)
	}
	if gs.authorized.Load() == 0 {
		t.Fatal("no request carried the header")
	}
	if !strings.HasPrefix(src, dir) {
		t.Fatalf("mirror %s not under %s", src, dir)
	}
	if _, err := os.Stat(filepath.Join(src, "HEAD")); err != nil {
		t.Fatalf("no bare mirror: %v", err)
	}

	// Fresh within FetchEvery: no fetch, the old commit.
	second := gs.push(t, map[string][]byte{"README": []byte("two\n")}, "second")
	before := gs.authorized.Load()
	if c, _, err := m.Checkout(ctx, gs.URL, "main", gs.Header); err != nil || c != first {
		t.Fatalf("cached Checkout = %s, %v; want %s", c, err, first)
	}
	if gs.authorized.Load() != before {
		t.Fatal("Checkout within FetchEvery fetched")
	}
	m.FetchEvery = 0
	if c, _, err := m.Checkout(ctx, gs.URL, "main", gs.Header); err != nil || c != second {
		t.Fatalf("Checkout after push = %s, %v; want %s", c, err, second)
	}
	if c, _, err := m.Checkout(ctx, gs.URL, "", gs.Header); err != nil || c != second {
		t.Fatalf("Checkout of HEAD = %s, %v; want %s", c, err, second)
	}
	if _, _, err := m.Checkout(ctx, gs.URL, "nope", gs.Header); err == nil {
		t.Fatal("Checkout of a missing branch succeeded")
	}
	assertNoSecret(t, dir)
	if strings.Contains(logs.String(), testToken) {
		t.Fatalf("logs hold the token: %s", logs)
	}
	if _, _, err := m.Checkout(ctx, "http://u:pw@127.0.0.1:1/x.git", "main", ""); err == nil {
		t.Fatal("URL with a password accepted")
	}
}

func TestRepoSpecHidesHeader(t *testing.T) {
	t.Parallel()
	spec := RepoSpec{URL: "https://example.com/r.git", Branch: "main", Header: "Authorization: Bearer " + testToken}
	js, err := json.Marshal(Recipe{Repo: &spec})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{fmt.Sprintf("%v %+v %#v %s", spec, spec, spec, spec), fmt.Sprintf("%v %+v %#v", &spec, &spec, &spec), string(js)} {
		if strings.Contains(s, testToken) {
			t.Errorf("header shown: %s", s)
		}
	}
}

func TestRepoProvisionCheckout(t *testing.T) {
	t.Parallel()
	for _, kind := range providerKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			gs := newGitServer(t, map[string][]byte{"README": []byte("hello\n"), "src/main.go": []byte("package main\n")})
			want := hostGitT(t, gs.work, "rev-parse", "HEAD")
			p, logs := mustProvider(t, kind, nil)
			recipe := Recipe{Repo: &RepoSpec{URL: gs.URL, Branch: "main", Header: gs.Header},
				Steps: []Step{{Name: "ls", Run: "test -f README && test -d .git"}}}
			sb := mustProvision(t, p, "repo", recipe)
			if got := Commit(sb); got != want {
				t.Fatalf("Commit = %q, want %s", got, want)
			}
			res := mustExec(t, sb, ExecRequest{Shell: sandboxGit + "git rev-parse HEAD; git remote get-url origin; git symbolic-ref --short HEAD; git status --porcelain; cat README; stat -c %u .git/config"})
			lines := strings.Split(strings.TrimSpace(res.Stdout), "\n")
			if res.ExitCode != 0 || len(lines) != 5 {
				t.Fatalf("in sandbox: %+v", res)
			}
			if lines[0] != want || lines[1] != gs.URL || lines[2] != "main" || lines[3] != "hello" {
				t.Fatalf("in sandbox: %q, want commit %s origin %s branch main, clean", lines, want, gs.URL)
			}
			s := sb.(*sandbox)
			uid, _ := s.p.sandboxIDs()
			if kind == KindProcess && lines[4] != fmt.Sprint(uid) {
				t.Fatalf(".git/config owned by %s, want %d", lines[4], uid)
			}
			assertNoSecret(t, s.workspace)
			assertNoSecret(t, p.(*provider).mirrors().dir)
			if strings.Contains(logs.String(), testToken) {
				t.Fatal("logs hold the token")
			}
			// Commit and the work tree follow the server.
			p.(*provider).mirrors().FetchEvery = 0
			next := gs.push(t, map[string][]byte{"README": []byte("again\n")}, "next")
			sb2 := mustProvision(t, p, "repo2", recipe)
			if Commit(sb2) != next {
				t.Fatalf("second Commit = %s, want %s", Commit(sb2), next)
			}
			// Without the header the fetch is refused and Provision fails, leaving nothing.
			bad := Recipe{Repo: &RepoSpec{URL: gs.URL, Branch: "main"}}
			if sb3, err := p.Provision(context.Background(), "repo3", bad); err == nil {
				sb3.Close()
				t.Fatal("Provision without the header succeeded")
			} else if strings.Contains(err.Error(), testToken) {
				t.Fatalf("error shows the token: %v", err)
			}
		})
	}
}

func TestRepoSaveRestoreWork(t *testing.T) {
	t.Parallel()
	for _, kind := range providerKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			gs := newGitServer(t, map[string][]byte{"README": []byte("hello\n"), "keep.txt": []byte("keep\n")})
			p, _ := mustProvider(t, kind, nil)
			recipe := Recipe{Repo: &RepoSpec{URL: gs.URL, Branch: "main", Header: gs.Header}}
			ctx := context.Background()
			sb := mustProvision(t, p, "work", recipe)
			base := Commit(sb)
			clean, cleanID, err := SaveWork(ctx, sb, base, WorkID{})
			if err != nil || !cleanID.Clean(base) || cleanID.Head != base || cleanID.Branch != "main" || clean.Patch != nil {
				t.Fatalf("SaveWork of a clean tree = %+v, %v", cleanID, err)
			}
			binary := []byte{0, 1, 2, 255, 254, 0, 'x'}
			mustExec(t, sb, ExecRequest{Shell: "printf 'hello\\nedited\\n' > README && mkdir -p new && printf 'fresh\\n' > new/file.txt && git add keep.txt"})
			if err := sb.WriteFile(ctx, "new/blob.bin", binary); err != nil {
				t.Fatal(err)
			}
			before := mustExec(t, sb, ExecRequest{Shell: sandboxGit + "git status --porcelain"}).Stdout
			patch, id, err := SaveWork(ctx, sb, base, cleanID)
			if err != nil || len(patch.Patch) == 0 || patch.Bundle != nil || id.PatchSHA256 != sha256Hex(patch.Patch) {
				t.Fatalf("SaveWork = %+v, %v", id, err)
			}
			// Saved again unchanged: nothing is read, the same id comes back.
			if again, againID, err := SaveWork(ctx, sb, base, id); err != nil || againID != id || again.Patch != nil {
				t.Fatalf("SaveWork unchanged = %+v (%d bytes), %v", againID, len(again.Patch), err)
			}
			if after := mustExec(t, sb, ExecRequest{Shell: sandboxGit + "git status --porcelain; ls .git/logbook-* 2>/dev/null"}).Stdout; after != before {
				t.Fatalf("SaveWork changed the status: %q, was %q", after, before)
			}

			fresh := mustProvision(t, p, "work2", recipe)
			if err := RestoreWork(ctx, fresh, patch); err != nil {
				t.Fatal(err)
			}
			for name, want := range map[string][]byte{"README": []byte("hello\nedited\n"), "new/file.txt": []byte("fresh\n"), "new/blob.bin": binary, "keep.txt": []byte("keep\n")} {
				got, err := fresh.ReadFile(ctx, name)
				if err != nil || !bytes.Equal(got, want) {
					t.Errorf("%s = %q, %v; want %q", name, got, err, want)
				}
			}
			st := mustExec(t, fresh, ExecRequest{Shell: sandboxGit + "git status --porcelain; ls .git/logbook-* 2>/dev/null"}).Stdout
			if !strings.Contains(st, " M README") || !strings.Contains(st, "?? new/") || strings.Contains(st, "logbook") {
				t.Fatalf("status after RestoreWork: %q", st)
			}
			if err := RestoreWork(ctx, fresh, Work{}); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// Commits made in the sandbox come back as they were — the same ids, on the same branch —
// with the uncommitted changes on top: a push of them again is a push of the same commits.
func TestRepoSaveRestoreLocalCommits(t *testing.T) {
	t.Parallel()
	gs := newGitServer(t, map[string][]byte{"README": []byte("hello\n")})
	p, _ := mustProvider(t, KindBwrap, nil)
	recipe := Recipe{Repo: &RepoSpec{URL: gs.URL, Branch: "main", Header: gs.Header}}
	ctx := context.Background()
	sb := mustProvision(t, p, "commits", recipe)
	base := Commit(sb)
	head := strings.TrimSpace(mustExec(t, sb, ExecRequest{Shell: sandboxGit + `set -e
git checkout -q -b logbook/fix
echo one > one.txt && git add one.txt && git -c user.name=a -c user.email=a@example.com commit -q -m one
echo two > two.txt && git add two.txt && git -c user.name=a -c user.email=a@example.com commit -q -m two
echo wip >> README
git rev-parse HEAD`}).Stdout)
	w, id, err := SaveWork(ctx, sb, base, WorkID{})
	if err != nil || w.Head != head || w.Branch != "logbook/fix" || len(w.Bundle) == 0 || len(w.Patch) == 0 || id.BundleSHA256 != sha256Hex(w.Bundle) {
		t.Fatalf("SaveWork = head %s branch %q, %d bytes of bundle, %d of patch, %v", w.Head, w.Branch, len(w.Bundle), len(w.Patch), err)
	}
	// More uncommitted work on the same commits: the bundle is not made or read again.
	mustExec(t, sb, ExecRequest{Shell: "echo more >> README"})
	more, moreID, err := SaveWork(ctx, sb, base, id)
	if err != nil || more.Bundle != nil || len(more.Patch) == 0 || moreID.BundleSHA256 != id.BundleSHA256 || moreID.PatchSHA256 == id.PatchSHA256 {
		t.Fatalf("SaveWork after more changes = %+v (%d bytes of bundle), %v", moreID, len(more.Bundle), err)
	}
	mustExec(t, sb, ExecRequest{Shell: "git checkout -q README && echo wip >> README"})
	fresh := mustProvision(t, p, "commits2", recipe)
	if err := RestoreWork(ctx, fresh, w); err != nil {
		t.Fatal(err)
	}
	got := mustExec(t, fresh, ExecRequest{Shell: sandboxGit + `git rev-parse HEAD; git symbolic-ref --short HEAD; git status --porcelain; git log --format=%s; git for-each-ref refs/logbook`}).Stdout
	want := head + "\nlogbook/fix\n M README\ntwo\none\nfirst\n"
	if !strings.HasPrefix(got, want) || strings.Contains(got, "refs/logbook") {
		t.Fatalf("after RestoreWork:\n%s\nwant:\n%s", got, want)
	}
	// What the sandbox says of itself is checked before use.
	for _, bad := range []Work{{Head: "--upload-pack=x"}, {Head: head, Branch: "-f"}, {Head: head, Branch: "a b"}} {
		if err := RestoreWork(ctx, fresh, bad); err == nil {
			t.Errorf("RestoreWork(%+v) took it", bad)
		}
	}
}

func TestRepoSaveWorkOverLimit(t *testing.T) {
	t.Parallel()
	gs := newGitServer(t, map[string][]byte{"README": []byte("hello\n")})
	p, _ := mustProvider(t, KindProcess, nil) // FileSizeBytes 1 MiB
	sb := mustProvision(t, p, "big", Recipe{Repo: &RepoSpec{URL: gs.URL, Header: gs.Header}})
	mustExec(t, sb, ExecRequest{Shell: "head -c 900000 /dev/urandom > a.bin; head -c 900000 /dev/urandom > b.bin"})
	if w, _, err := SaveWork(context.Background(), sb, Commit(sb), WorkID{}); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("SaveWork of a patch over the file size limit = %d bytes, %v; want ErrTooLarge", len(w.Patch), err)
	}
}

// A bundle of commits over the file size limit fails as ErrTooLarge too, saying so.
func TestRepoSaveWorkBundleOverLimit(t *testing.T) {
	t.Parallel()
	gs := newGitServer(t, map[string][]byte{"README": []byte("hello\n")})
	p, _ := mustProvider(t, KindProcess, nil) // FileSizeBytes 1 MiB
	sb := mustProvision(t, p, "bigcommit", Recipe{Repo: &RepoSpec{URL: gs.URL, Header: gs.Header}})
	res := mustExec(t, sb, ExecRequest{Shell: sandboxGit + "head -c 900000 /dev/urandom > a.bin && head -c 900000 /dev/urandom > b.bin && git add . && git -c user.name=a -c user.email=a@example.com commit -q -m big && echo ok"})
	if !strings.Contains(res.Stdout, "ok") {
		t.Fatalf("commit: %+v", res)
	}
	if _, _, err := SaveWork(context.Background(), sb, Commit(sb), WorkID{}); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("SaveWork of commits over the file size limit: %v; want ErrTooLarge", err)
	}
}

// Refresh fetches the mirrors Checkouts used, so the next Checkout gets what was pushed since
// without fetching itself.
func TestMirrorsRefresh(t *testing.T) {
	t.Parallel()
	gs := newGitServer(t, map[string][]byte{"README": []byte("v1\n")})
	m := NewMirrors(filepath.Join(t.TempDir(), "mirrors"), zerolog.Nop())
	ctx := context.Background()
	first, _, err := m.Checkout(ctx, gs.URL, "main", gs.Header)
	if err != nil {
		t.Fatal(err)
	}
	second := gs.push(t, map[string][]byte{"README": []byte("v2\n")}, "v2")
	m.FetchEvery = time.Hour // a Checkout now would not fetch
	if got, _, err := m.Checkout(ctx, gs.URL, "main", gs.Header); err != nil || got != first {
		t.Fatalf("before Refresh: %s %v; want the cached %s", got, err, first)
	}
	m.FetchEvery = 0
	m.Refresh(ctx)
	m.FetchEvery = time.Hour
	if got, _, err := m.Checkout(ctx, gs.URL, "main", gs.Header); err != nil || got != second {
		t.Fatalf("after Refresh: %s %v; want %s", got, err, second)
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if err := m.Run(cancelled); err != nil {
		t.Fatal(err)
	}
}

// Work whose commits the checkout holds already (merged since) is not brought back: HEAD stays
// where the checkout has it.
func TestRepoRestoreOfMergedWorkLeavesHEAD(t *testing.T) {
	t.Parallel()
	gs := newGitServer(t, map[string][]byte{"README": []byte("hello\n")})
	p, _ := mustProvider(t, KindProcess, nil)
	sb := mustProvision(t, p, "merged", Recipe{Repo: &RepoSpec{URL: gs.URL, Branch: "main", Header: gs.Header}})
	base := Commit(sb)
	ahead := strings.TrimSpace(mustExec(t, sb, ExecRequest{Shell: sandboxGit + "git -c user.name=a -c user.email=a@example.com commit -q --allow-empty -m later && git rev-parse HEAD"}).Stdout)
	if err := RestoreWork(context.Background(), sb, Work{Head: base, Branch: "logbook/old"}); err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(mustExec(t, sb, ExecRequest{Shell: sandboxGit + "git rev-parse HEAD; git symbolic-ref --short HEAD"}).Stdout); got != ahead+"\nmain" {
		t.Fatalf("after restoring merged work: %q; want %s on main", got, ahead)
	}
}

// A Checkout waiting for a mirror another git command holds gives up when its context ends.
func TestMirrorsCheckoutWaitEndsWithItsContext(t *testing.T) {
	t.Parallel()
	gs := newGitServer(t, map[string][]byte{"README": []byte("v1\n")})
	m := NewMirrors(filepath.Join(t.TempDir(), "mirrors"), zerolog.Nop())
	mr := m.get(gs.URL)
	mr.lock <- struct{}{} // a fetch that never ends
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, _, err := m.Checkout(ctx, gs.URL, "main", gs.Header); !errors.Is(err, context.Canceled) {
		t.Fatalf("Checkout behind a held mirror: %v", err)
	}
	<-mr.lock
	if _, _, err := m.Checkout(context.Background(), gs.URL, "main", gs.Header); err != nil {
		t.Fatal(err)
	}
}
