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
	"slices"
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

// TestEgressBranchTakeover: from a bwrap sandbox, a hostile
// session cannot make another session's logbook/ branch its own — neither by a hand-made
// "create" of the existing branch (old id all zeros), which the forge refuses with HTTP 200,
// nor by a push the forge's own hook refuses (the refusal only in the report-status body);
// and its next ordinary forced push is refused, the victim's branch untouched. The records
// say which refs the repository took and which it refused, and why.
func TestEgressBranchTakeover(t *testing.T) {
	requireGit(t)
	repo := gittest.ServeWith(t, gittest.Options{Path: "acme/api.git", Files: map[string]string{"README.md": "# api\n"}, Push: true})
	// The forge refuses logbook/held while the marker is there: its refusal is only in the
	// report-status body of an HTTP 200.
	marker := filepath.Join(repo.Bare, "refuse-held")
	hook := "#!/bin/sh\nif [ -e '" + marker + "' ] && [ \"$1\" = refs/heads/logbook/held ]; then echo 'held by the forge' >&2; exit 1; fi\n"
	if err := os.WriteFile(filepath.Join(repo.Bare, "hooks", "update"), []byte(hook), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(marker, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	// The victim: another session's branch.
	repo.Git("update-ref", "refs/heads/logbook/a", repo.Commit)

	rec := &records{}
	proxy := egress.New(egress.Options{Record: rec.add,
		Git: &egress.Remote{URL: repo.URL, Protected: []string{"main"}, BranchPrefix: "logbook/"}})
	p, _ := mustProvider(t, KindBwrap, nil)
	sb := mustProvision(t, p, "attacker", Recipe{Repo: &RepoSpec{URL: repo.URL, Branch: "main"}, Egress: proxy})

	// A create of logbook/a, made by hand: git itself would send the branch's id as old.
	res := mustExec(t, sb, ExecRequest{Shell: `set -e
u=$(git config --get-regexp '^url\..*\.insteadof$' | sed -e 's/^url\.//' -e 's/\.insteadof .*$//')
victim=$(git ls-remote origin refs/heads/logbook/a | cut -f1)
line="0000000000000000000000000000000000000000 $victim refs/heads/logbook/a"
caps="report-status side-band-64k agent=evil"
printf '%04x%s\0%s\n' $((4 + ${#line} + 1 + ${#caps} + 1)) "$line" "$caps" > /tmp/body
printf 0000 >> /tmp/body
git pack-objects --stdout -q </dev/null >> /tmp/body
curl -s --noproxy '*' -H 'Content-Type: application/x-git-receive-pack-request' --data-binary @/tmp/body "$u/git-receive-pack" | tr -c '[:print:]\n' '.'`})
	if res.ExitCode != 0 || !strings.Contains(res.Stdout, "ng refs/heads/logbook/a") {
		t.Fatalf("the hand-made create was not refused: %+v", res)
	}
	git := `export GIT_AUTHOR_NAME=bot GIT_AUTHOR_EMAIL=bot@example.com GIT_COMMITTER_NAME=bot GIT_COMMITTER_EMAIL=bot@example.com; `
	res = mustExec(t, sb, ExecRequest{Shell: git + `git commit -q --allow-empty -m takeover && git push -f origin HEAD:refs/heads/logbook/a 2>&1`})
	if res.ExitCode == 0 || !strings.Contains(res.Stdout, "logbook/a exists and was not pushed from this thread") {
		t.Errorf("the forced push after the hand-made create: %+v", res)
	}
	if got := repo.Branch("logbook/a"); got != repo.Commit {
		t.Fatalf("the victim's branch moved to %s", got)
	}

	// A push the forge's hook refuses, beside one it takes: only the taken one is the
	// session's. Then another session makes logbook/held; this one may not move it.
	res = mustExec(t, sb, ExecRequest{Shell: git + `git push origin HEAD:refs/heads/logbook/mine HEAD:refs/heads/logbook/held 2>&1`})
	if res.ExitCode == 0 || !strings.Contains(res.Stdout, "logbook/held (hook declined)") || repo.Branch("logbook/mine") == "" {
		t.Fatalf("a push half refused by the forge: %+v", res)
	}
	if err := os.Remove(marker); err != nil {
		t.Fatal(err)
	}
	repo.Git("update-ref", "refs/heads/logbook/held", repo.Commit)
	res = mustExec(t, sb, ExecRequest{Shell: git + `git commit -q --allow-empty -m again && git push -f origin HEAD:refs/heads/logbook/held 2>&1; git push -f origin HEAD:refs/heads/logbook/mine 2>&1`})
	if !strings.Contains(res.Stdout, "logbook/held exists and was not pushed from this thread") {
		t.Errorf("a forced push to the branch the forge refused it: %+v", res)
	}
	if got := repo.Branch("logbook/held"); got != repo.Commit {
		t.Fatalf("the other session's logbook/held moved to %s", got)
	}
	if head := strings.TrimSpace(mustExec(t, sb, ExecRequest{Shell: `git rev-parse HEAD`}).Stdout); repo.Branch("logbook/mine") != head {
		t.Errorf("its own branch was not updated: %s, HEAD %s", repo.Branch("logbook/mine"), head)
	}

	if err := sb.Close(); err != nil {
		t.Fatal(err)
	}
	var crafted, half bool
	for _, c := range rec.all() {
		if c.Kind != egress.KindGit || len(c.Refs) == 0 {
			continue
		}
		switch {
		case c.Refs[0] == "refs/heads/logbook/a" && len(c.Refs) == 1 && strings.Contains(c.Reason, "exists and was not pushed from this thread"):
			crafted = !c.Allowed && len(c.Pushed) == 0
		case len(c.Refs) == 2:
			half = c.Allowed && fmt.Sprint(c.Pushed) == "[refs/heads/logbook/mine]" &&
				strings.Contains(c.Reason, "refs/heads/logbook/held refused by the repository: hook declined")
		}
		if c.Allowed && slices.Contains(c.Pushed, "refs/heads/logbook/a") || slices.Contains(c.Pushed, "refs/heads/logbook/held") {
			t.Errorf("a record says the session pushed another's branch: %+v", c)
		}
	}
	if !crafted || !half {
		t.Errorf("records (the hand-made create refused %v, the half-refused push %v): %+v", crafted, half, rec.all())
	}
}

// sentQueries records the requests a proxy sends to the repository.
type sentQueries struct {
	mu   sync.Mutex
	sent []string
}

func (s *sentQueries) RoundTrip(r *http.Request) (*http.Response, error) {
	s.mu.Lock()
	s.sent = append(s.sent, r.Method+" "+r.URL.EscapedPath()+"?"+r.URL.RawQuery)
	s.mu.Unlock()
	return http.DefaultTransport.RoundTrip(r)
}

func (s *sentQueries) all() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.sent...)
}

// TestEgressRecordsWhatWasSent: from a bwrap sandbox, requests the proxy could read one way
// and send on another — a repeated or unknown query parameter, an escaped path, a query on a
// POST — are refused and recorded refused, and never reach the repository; what goes on is
// what the record says. A plain-http request's Host header does not pick another site than
// its URL, which the record names.
func TestEgressRecordsWhatWasSent(t *testing.T) {
	requireGit(t)
	repo := gittest.ServeWith(t, gittest.Options{Path: "acme/api.git", Files: map[string]string{"README.md": "# api\n"}, Push: true})
	hosts := make(chan string, 1)
	site := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hosts <- r.Host }))
	defer site.Close()
	su, _ := url.Parse(site.URL)
	allow, err := egress.ParseAllowlist(su.Host)
	if err != nil {
		t.Fatal(err)
	}
	sent := &sentQueries{}
	rec := &records{}
	proxy := egress.New(egress.Options{Allow: allow, Record: rec.add, Transport: sent,
		Git: &egress.Remote{URL: repo.URL, Protected: []string{"main"}, BranchPrefix: "logbook/"}})
	p, _ := mustProvider(t, KindBwrap, nil)
	sb := mustProvision(t, p, "differ", Recipe{Repo: &RepoSpec{URL: repo.URL, Branch: "main"}, Egress: proxy})
	res := mustExec(t, sb, ExecRequest{Shell: `u=$(git config --get-regexp '^url\..*\.insteadof$' | sed -e 's/^url\.//' -e 's/\.insteadof .*$//')
c() { curl -s -o /dev/null -w '%{http_code}\n' --noproxy '*' "$@"; }
c "$u/info/refs?service=git-upload-pack&service=git-receive-pack"
c "$u/info/refs?service=git-upload-pack&x=1"
c "$u/info/refs?service=git-upload-pack;x=1"
c "$u/info%2Frefs?service=git-upload-pack"
c --data-binary 0000 "$u/git-upload-pack?service=git-receive-pack"
git ls-remote -q origin refs/heads/main >/dev/null && echo listed
curl -s -o /dev/null -w '%{http_code}\n' --noproxy '' -H 'Host: elsewhere.example' ` + site.URL + `/`})
	if got := strings.Fields(res.Stdout); !slices.Equal(got, []string{"403", "403", "403", "403", "403", "listed", "200"}) {
		t.Fatalf("the ambiguous requests, then git, then plain http: %+v", res)
	}
	if got := <-hosts; got != su.Host {
		t.Errorf("the site was asked for Host %q through the proxy, not %q", got, su.Host)
	}
	if err := sb.Close(); err != nil {
		t.Fatal(err)
	}
	if got := sent.all(); !slices.Equal(got, []string{"GET /acme/api.git/info/refs?service=git-upload-pack", "POST /acme/api.git/git-upload-pack?"}) {
		t.Errorf("the repository was sent %q; want only git's ls-remote", got)
	}
	var refused, listed, site1 int
	for _, c := range rec.all() {
		switch {
		case c.Kind == egress.KindGit && !c.Allowed && strings.Contains(c.Reason, "not a request of git's smart HTTP protocol") ||
			c.Kind == egress.KindGit && !c.Allowed && strings.Contains(c.Reason, "takes one query parameter") ||
			c.Kind == egress.KindGit && !c.Allowed && strings.Contains(c.Reason, "takes no query"):
			refused++
		case c.Kind == egress.KindGit && c.Allowed && (c.Reason == "git-upload-pack (refs advertised)" || c.Reason == "git-upload-pack"):
			listed++
		case c.Kind == egress.KindHTTP && c.Allowed && net.JoinHostPort(c.Host, fmt.Sprint(c.Port)) == su.Host:
			site1++
		default:
			t.Errorf("record: %+v", c)
		}
	}
	if refused != 5 || listed != 2 || site1 != 1 {
		t.Errorf("records: %d refused, %d listed, %d of the site: %+v", refused, listed, site1, rec.all())
	}
}
