package sandbox

import (
	"encoding/base64"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/logbook/logbook/sandbox/egress"
	"github.com/logbook/logbook/sandbox/gittest"
)

// records collects an egress proxy's records.
type records struct {
	mu sync.Mutex
	cs []egress.Connection
}

func (r *records) add(c egress.Connection) {
	r.mu.Lock()
	r.cs = append(r.cs, c)
	r.mu.Unlock()
}

func (r *records) all() []egress.Connection {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]egress.Connection(nil), r.cs...)
}

// TestEgressGitThroughProxyTokenNowhere: a sandbox with the network off clones, commits and
// pushes its repository through the egress proxy, which adds the token outside; an allowed
// host is reached, any other is refused and recorded; the token is nowhere the sandbox can
// look. bwrap enforces it; the process provider only proxies.
func TestEgressGitThroughProxyTokenNowhere(t *testing.T) {
	for _, kind := range []string{KindBwrap, KindProcess} {
		t.Run(kind, func(t *testing.T) { testEgress(t, kind) })
	}
}

func testEgress(t *testing.T, kind string) {
	requireGit(t)
	const token = "ghs_egress-T0KEN-must-stay-outside"
	auth := "Basic " + base64.StdEncoding.EncodeToString([]byte("x-access-token:"+token))
	repo := gittest.ServeWith(t, gittest.Options{Path: "acme/api.git", Files: map[string]string{"README.md": "# api\n", "test.sh": "grep -q fixed fix.txt\n"}, Push: true, Auth: auth})
	allowed := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "allowed-ok") }))
	defer allowed.Close()
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if kind == KindBwrap || r.URL.Path != "/direct" { // the process provider does not isolate
			t.Errorf("a host not on the allowlist was reached: %s", r.URL)
		}
	}))
	defer other.Close()
	au, _ := url.Parse(allowed.URL)
	allow, err := egress.ParseAllowlist(au.Host)
	if err != nil {
		t.Fatal(err)
	}
	rec := &records{}
	proxy := egress.New(egress.Options{Allow: allow, Record: rec.add,
		Git: &egress.Remote{URL: repo.URL, Header: "Authorization: " + auth, Protected: []string{"main"}}})
	p, _ := mustProvider(t, kind, nil)
	sb := mustProvision(t, p, "egress", Recipe{Repo: &RepoSpec{URL: repo.URL, Branch: "main", Header: "Authorization: " + auth}, Egress: proxy})

	git := `export GIT_AUTHOR_NAME=bot GIT_AUTHOR_EMAIL=bot@example.com GIT_COMMITTER_NAME=bot GIT_COMMITTER_EMAIL=bot@example.com; `
	res := mustExec(t, sb, ExecRequest{Shell: git + `set -e
git fetch -q origin
echo fixed > fix.txt
sh test.sh
git checkout -q -b logbook/fix
git add fix.txt
git commit -q -m fix
git push -q origin logbook/fix 2>&1
git push -q origin logbook/fix 2>&1
git rev-parse HEAD`})
	if res.ExitCode != 0 {
		t.Fatalf("clone, edit, test, push: %+v", res)
	}
	if got := repo.Git("rev-parse", "refs/heads/logbook/fix"); got != strings.TrimSpace(res.Stdout) {
		t.Fatalf("the pushed branch is at %q, the sandbox's HEAD at %q", got, res.Stdout)
	}
	res = mustExec(t, sb, ExecRequest{Shell: git + `git push origin HEAD:main 2>&1`})
	if res.ExitCode == 0 || !strings.Contains(res.Stdout, "main is protected") {
		t.Errorf("a push to main: %+v", res)
	}

	// An allowed host, through the proxy; another, refused by the proxy; and, with the proxy
	// bypassed, nothing at all (bwrap).
	ou, _ := url.Parse(other.URL)
	res = mustExec(t, sb, ExecRequest{Shell: `curl -s --noproxy '' ` + allowed.URL + `/x; echo; ` +
		`curl -s -o /dev/null -w '%{http_code}\n' --noproxy '' ` + other.URL + `/y; ` +
		`curl -s -o /dev/null -w '%{http_connect}\n' -p --noproxy '' https://` + ou.Host + `/z; ` +
		`curl -s -o /dev/null -w '%{http_code}\n' --max-time 5 ` + other.URL + `/direct`})
	lines := strings.Split(strings.TrimSpace(res.Stdout), "\n")
	if len(lines) != 4 || lines[0] != "allowed-ok" || lines[1] != "403" || lines[2] != "403" {
		t.Fatalf("allowed, refused over http, refused over CONNECT, direct: %+v", res)
	}
	if kind == KindBwrap && lines[3] != "000" {
		t.Errorf("a direct connection from a bwrap sandbox got through: %q", lines[3])
	}

	// The token is in no environment, file, process or output the sandbox can see.
	// (The patterns come on stdin: in the command line they would be in the process list.)
	res = mustExec(t, sb, ExecRequest{Stdin: []byte(token + "\n" + auth[len("Basic "):] + "\n"), Shell: `grep -rl -a -F -f /dev/stdin . /tmp /run 2>/dev/null; echo searched; ` +
		`cat /proc/self/environ; env; git config -l --show-origin; ` +
		`printf 'protocol=http\nhost=` + ProxyAddr + `\n\n' | GIT_TERMINAL_PROMPT=0 git credential fill 2>&1; ` +
		`for f in /proc/[0-9]*/cmdline /proc/[0-9]*/environ; do cat "$f" 2>/dev/null; echo; done`})
	for _, s := range []string{token, auth[len("Basic "):]} {
		if strings.Contains(res.Stdout+res.Stderr, s) {
			t.Fatalf("the sandbox saw the token:\n%s", res.Stdout)
		}
	}
	if !strings.Contains(res.Stdout, "searched") || !strings.Contains(res.Stdout, "HTTPS_PROXY=") {
		t.Fatalf("the search did not run: %+v", res)
	}
	if kind == KindBwrap {
		if err := filepath.Walk(sb.(*sandbox).workspace, func(path string, info os.FileInfo, err error) error {
			if err == nil && info.Mode().IsRegular() {
				if b, _ := os.ReadFile(path); strings.Contains(string(b), token) {
					t.Errorf("%s holds the token", path)
				}
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}

	if err := sb.Close(); err != nil {
		t.Fatal(err)
	}
	var pushed, refusedHTTP, refusedConnect, allowedHTTP bool
	for _, c := range rec.all() {
		if strings.Contains(fmt.Sprintf("%+v", c), token) {
			t.Fatalf("a record holds the token: %+v", c)
		}
		_, port, _ := net.SplitHostPort(ou.Host)
		switch {
		case c.Kind == egress.KindGit && c.Reason == "git-receive-pack" && len(c.Refs) == 1 && c.Refs[0] == "refs/heads/logbook/fix":
			pushed = true
		case c.Kind == egress.KindHTTP && !c.Allowed && fmt.Sprint(c.Port) == port:
			refusedHTTP = true
		case c.Kind == egress.KindConnect && !c.Allowed && fmt.Sprint(c.Port) == port:
			refusedConnect = true
		case c.Kind == egress.KindHTTP && c.Allowed && c.BytesIn == int64(len("allowed-ok")):
			allowedHTTP = true
		}
	}
	if !pushed || !refusedHTTP || !refusedConnect || !allowedHTTP {
		t.Errorf("records (push %v, refused http %v, refused connect %v, allowed %v): %+v", pushed, refusedHTTP, refusedConnect, allowedHTTP, rec.all())
	}
	if entries, _ := os.ReadDir(filepath.Join(p.(*provider).cfg.BaseDir, ".run")); len(entries) != 0 {
		t.Errorf("sockets left after Close: %v", entries)
	}
}
