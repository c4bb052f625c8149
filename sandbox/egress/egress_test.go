package egress

import (
	"bufio"
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"go.uber.org/goleak"

	"github.com/logbook/logbook/sandbox/gittest"
	"github.com/logbook/logbook/session/clip"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestParseAllowlist(t *testing.T) {
	a, err := ParseAllowlist("github.com:443, *.npmjs.org:443 registry.example.com:*,10.0.0.7:8080,[::1]:9000")
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		host       string
		port       int
		ok, byAddr bool
	}{
		{"github.com", 443, true, false},
		{"GitHub.com.", 443, true, false},
		{"github.com", 80, false, false},
		{"api.github.com", 443, false, false},
		{"registry.npmjs.org", 443, true, false},
		{"npmjs.org", 443, false, false},
		{"evilnpmjs.org", 443, false, false},
		{"registry.example.com", 5000, true, false},
		{"10.0.0.7", 8080, true, true},
		{"10.0.0.7", 8081, false, false},
		{"::1", 9000, true, true},
		{"127.0.0.1", 443, false, false},
	}
	for _, c := range cases {
		ok, byAddr := a.allows(c.host, c.port)
		if ok != c.ok || byAddr != c.byAddr {
			t.Errorf("allows(%s, %d) = %v, %v; want %v, %v", c.host, c.port, ok, byAddr, c.ok, c.byAddr)
		}
	}
	if got := a.String(); got != "github.com:443,*.npmjs.org:443,registry.example.com:*,10.0.0.7:8080,[::1]:9000" {
		t.Errorf("String() = %q", got)
	}
	for _, bad := range []string{"github.com", "*:443", "git*.com:443", "github.com:0", "github.com:x", ":443", "a..b:1"} {
		if _, err := ParseAllowlist(bad); err == nil {
			t.Errorf("ParseAllowlist(%q) took it", bad)
		}
	}
	if empty, err := ParseAllowlist(" "); err != nil || !empty.Empty() {
		t.Errorf("blank: %v %v", empty, err)
	}
}

// recorder collects Record calls.
type recorder struct {
	mu    sync.Mutex
	conns []Connection
}

func (r *recorder) record(c Connection) {
	r.mu.Lock()
	r.conns = append(r.conns, c)
	r.mu.Unlock()
}

func (r *recorder) all() []Connection {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Connection(nil), r.conns...)
}

// serveProxy starts a proxy on loopback and returns its URL, with its credentials.
func serveProxy(t *testing.T, opt Options) (*Proxy, string, *recorder) {
	t.Helper()
	rec := &recorder{}
	opt.Record = rec.record
	p := New(opt)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- p.Serve(l) }()
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	return p, "http://logbook:" + p.Secret() + "@" + l.Addr().String(), rec
}

// echoServer answers each line with "echo: line".
func echoServer(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { l.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				sc := bufio.NewScanner(c)
				for sc.Scan() {
					fmt.Fprintf(c, "echo: %s\n", sc.Text())
				}
			}()
		}
	}()
	return l.Addr().String()
}

// connectThrough opens a CONNECT tunnel and returns the status line and the connection.
func connectThrough(t *testing.T, proxyURL, target string) (string, net.Conn, *bufio.Reader) {
	t.Helper()
	u, _ := url.Parse(proxyURL)
	c, err := net.Dial("tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	auth := ""
	if u.User != nil {
		pass, _ := u.User.Password()
		auth = "Proxy-Authorization: Basic " + base64.StdEncoding.EncodeToString([]byte(u.User.Username()+":"+pass)) + "\r\n"
	}
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n%s\r\n", target, target, auth)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 {
		body, _ := io.ReadAll(resp.Body)
		return resp.Status + ": " + string(body), c, br
	}
	return resp.Status, c, br
}

func TestConnectAllowedAndRefused(t *testing.T) {
	echo := echoServer(t)
	allow, err := ParseAllowlist(echo)
	if err != nil {
		t.Fatal(err)
	}
	p, proxyURL, rec := serveProxy(t, Options{Allow: allow})

	status, c, br := connectThrough(t, proxyURL, echo)
	if !strings.HasPrefix(status, "200") {
		t.Fatalf("allowed CONNECT: %s", status)
	}
	fmt.Fprintf(c, "hello\n")
	line, err := br.ReadString('\n')
	if err != nil || line != "echo: hello\n" {
		t.Fatalf("through the tunnel: %q %v", line, err)
	}
	c.Close()

	_, port, _ := net.SplitHostPort(echo)
	for _, target := range []string{"127.0.0.2:" + port, "localhost:" + port, "example.com:443"} {
		status, _, _ := connectThrough(t, proxyURL, target)
		if !strings.HasPrefix(status, "403") || !strings.Contains(status, "not on the sandbox's egress allowlist") {
			t.Errorf("CONNECT %s: %s", target, status)
		}
	}
	// Without the proxy's secret, nothing: another sandbox or process on the host finds the
	// port, not the password.
	u, _ := url.Parse(proxyURL)
	u.User = url.UserPassword("logbook", "guessed")
	if status, _, _ := connectThrough(t, u.String(), echo); !strings.HasPrefix(status, "407") {
		t.Errorf("CONNECT with a wrong secret: %s", status)
	}
	u.User = nil
	if status, _, _ := connectThrough(t, u.String(), echo); !strings.HasPrefix(status, "407") {
		t.Errorf("CONNECT without credentials: %s", status)
	}
	p.Close() // waits for the tunnel's handler, so its record is in
	got := rec.all()
	if len(got) != 6 {
		t.Fatalf("records: %+v", got)
	}
	var tunnel Connection
	for _, r := range got {
		if r.Allowed {
			tunnel = r
		}
	}
	if tunnel.Kind != KindConnect || tunnel.Host != "127.0.0.1" || tunnel.BytesOut != 6 || tunnel.BytesIn != 12 {
		t.Errorf("the tunnel's record: %+v", tunnel)
	}
	refusedHosts := map[string]bool{}
	for _, r := range got {
		if !r.Allowed {
			refusedHosts[r.Host] = true
			if r.Reason == "" || r.Kind != KindConnect {
				t.Errorf("a refusal without a reason: %+v", r)
			}
		}
	}
	if !refusedHosts["127.0.0.2"] || !refusedHosts["localhost"] || !refusedHosts["example.com"] || !refusedHosts["127.0.0.1"] {
		t.Errorf("refusals recorded: %v", refusedHosts)
	}
}

// fakeResolver answers every name with addrs.
type fakeResolver []netip.Addr

func (f fakeResolver) LookupNetIP(context.Context, string, string) ([]netip.Addr, error) {
	return f, nil
}

func TestNameResolvingToPrivateAddressIsRefused(t *testing.T) {
	echo := echoServer(t)
	_, port, _ := net.SplitHostPort(echo)
	allow, _ := ParseAllowlist("*.example.com:*")
	for _, addr := range []string{"127.0.0.1", "10.1.2.3", "169.254.169.254", "::1", "100.64.0.1"} {
		_, proxyURL, rec := serveProxy(t, Options{Allow: allow, Resolver: fakeResolver{netip.MustParseAddr(addr)}})
		status, _, _ := connectThrough(t, proxyURL, "metadata.example.com:"+port)
		if !strings.HasPrefix(status, "403") || !strings.Contains(status, "non-public address") {
			t.Errorf("a name resolving to %s: %s", addr, status)
		}
		if got := rec.all(); len(got) != 1 || got[0].Allowed {
			t.Errorf("records: %+v", got)
		}
	}
}

func TestPlainHTTPForwarded(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Proxy-Authorization") != "" || r.Header.Get("Proxy-Connection") != "" {
			t.Error("a hop-by-hop header reached the server")
		}
		fmt.Fprintf(w, "hello %s", r.URL.Path)
	}))
	defer srv.Close()
	u, _ := url.Parse(srv.URL)
	allow, _ := ParseAllowlist(u.Host)
	_, proxyURL, rec := serveProxy(t, Options{Allow: allow})
	pu, _ := url.Parse(proxyURL)
	tr := &http.Transport{Proxy: http.ProxyURL(pu)}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	req, _ := http.NewRequest("GET", srv.URL+"/x", nil)
	req.Header.Set("Proxy-Connection", "keep-alive")
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "hello /x" {
		t.Fatalf("body %q", body)
	}
	resp, err = client.Get("http://example.com/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("unlisted host: %s", resp.Status)
	}
	got := rec.all()
	if len(got) != 2 || !got[0].Allowed || got[0].Kind != KindHTTP || got[0].BytesIn != 8 || got[1].Allowed || got[1].Host != "example.com" {
		t.Errorf("records: %+v", got)
	}
}

// hostGit runs the host's git with a clean configuration and returns its combined output.
func hostGit(t *testing.T, dir string, env []string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	home := t.TempDir()
	cmd.Env = append([]string{"PATH=/usr/bin:/bin", "HOME=" + home, "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null",
		"GIT_TERMINAL_PROMPT=0", "GIT_AUTHOR_NAME=a", "GIT_AUTHOR_EMAIL=a@example.com", "GIT_COMMITTER_NAME=a", "GIT_COMMITTER_EMAIL=a@example.com"}, env...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func TestGitRemoteAddsCredentialsAndGuardsPushes(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Fatal("git is needed (apt-get install git); .ci/run installs it")
	}
	const token = "ghs_sekrit-token-value"
	auth := "Basic " + base64.StdEncoding.EncodeToString([]byte("x-access-token:"+token))
	repo := gittest.ServeWith(t, gittest.Options{Path: "acme/api.git", Files: map[string]string{"README.md": "# api\n"}, Push: true, Auth: auth})
	p, proxyURL, rec := serveProxy(t, Options{Git: &Remote{URL: repo.URL, Header: "Authorization: " + auth, Protected: []string{"main"}, BranchPrefix: "logbook/"}})

	work := filepath.Join(t.TempDir(), "w")
	// The checkout's origin is the repository's URL; the rule sends it through the proxy.
	pu, _ := url.Parse(proxyURL)
	rewrite := []string{"GIT_CONFIG_COUNT=1", "GIT_CONFIG_KEY_0=url.http://" + pu.Host + p.GitPath() + ".insteadOf", "GIT_CONFIG_VALUE_0=" + repo.URL}
	if out, err := hostGit(t, "", rewrite, "clone", "-q", repo.URL, work); err != nil {
		t.Fatalf("clone through the proxy: %v\n%s", err, out)
	}
	if err := os.WriteFile(filepath.Join(work, "fix.txt"), []byte("fixed\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"add", "fix.txt"}, {"commit", "-q", "-m", "fix"}} {
		if out, err := hostGit(t, work, rewrite, args...); err != nil {
			t.Fatalf("%v: %v\n%s", args, err, out)
		}
	}
	if out, err := hostGit(t, work, rewrite, "push", "-q", "origin", "HEAD:refs/heads/logbook/fix"); err != nil {
		t.Fatalf("push of a branch: %v\n%s", err, out)
	}
	head, _ := hostGit(t, work, nil, "rev-parse", "HEAD")
	if got := repo.Git("rev-parse", "refs/heads/logbook/fix"); got != strings.TrimSpace(head) {
		t.Fatalf("the pushed branch is at %q, want %q", got, head)
	}
	// The same push again (a replay) succeeds and sends nothing: git finds the branch there.
	if out, err := hostGit(t, work, rewrite, "push", "-q", "origin", "HEAD:refs/heads/logbook/fix"); err != nil {
		t.Fatalf("replayed push: %v\n%s", err, out)
	}

	for _, c := range []struct{ ref, want string }{
		{"HEAD:refs/heads/main", "main is protected"},
		{"HEAD:refs/tags/v1", "refs/tags/v1 is not a branch"},
		{":refs/heads/logbook/fix", "deleting logbook/fix is not allowed"},
		{"HEAD:refs/heads/release", "release is not one of the sandbox's branches: push to a branch under logbook/"},
	} {
		out, err := hostGit(t, work, rewrite, "push", "origin", c.ref)
		if err == nil || !strings.Contains(out, "[remote rejected]") || !strings.Contains(out, c.want) {
			t.Errorf("push %s: %v\n%s", c.ref, err, out)
		}
	}
	if got := repo.Git("rev-parse", "refs/heads/main"); got != repo.Commit {
		t.Fatalf("main moved to %s", got)
	}

	// Every request upstream carried the credentials; nothing the proxy said carries them.
	for _, a := range repo.Authorizations() {
		if a != auth {
			t.Fatalf("a request reached the repository with Authorization %q", a)
		}
	}
	var pushes, refusals int
	for _, r := range rec.all() {
		if strings.Contains(fmt.Sprintf("%+v", r), token) {
			t.Fatalf("a record holds the token: %+v", r)
		}
		if r.Kind != KindGit || r.Host != "127.0.0.1" {
			t.Errorf("record: %+v", r)
		}
		if strings.HasPrefix(r.Reason, "push refused") {
			refusals++
		}
		if r.Reason == "git-receive-pack" && len(r.Refs) == 1 && r.Refs[0] == "refs/heads/logbook/fix" && r.BytesOut > 0 {
			pushes++
		}
	}
	if pushes != 1 || refusals != 4 {
		t.Errorf("pushes %d, refusals %d: %+v", pushes, refusals, rec.all())
	}
}

func TestGitRemoteWithoutCredentialsNeverAsksTheSandbox(t *testing.T) {
	repo := gittest.ServeWith(t, gittest.Options{Path: "r.git", Files: map[string]string{"a": "a"}, Auth: "Basic d3Jvbmc="})
	p, proxyURL, rec := serveProxy(t, Options{Git: &Remote{URL: repo.URL}})
	pu, _ := url.Parse(proxyURL)
	base := "http://" + pu.Host
	resp, err := http.Get(base + p.GitPath() + "/info/refs?service=git-upload-pack")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden || resp.Header.Get("WWW-Authenticate") != "" {
		t.Errorf("a 401 upstream reached the sandbox as %s %v", resp.Status, resp.Header)
	}
	for _, path := range []string{p.GitPath() + "/HEAD", p.GitPath() + "/objects/info/packs", GitPath + "/info/refs?service=git-upload-pack", "/"} {
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode < 400 {
			t.Errorf("GET %s: %s", path, resp.Status)
		}
	}
	// (The path without the secret is not the repository: it is "not a proxy request".)
	if got := rec.all(); len(got) != 5 || got[0].Allowed != true || got[1].Allowed {
		t.Errorf("records: %+v", got)
	}
}

// A push over git's http.postBuffer (1 MiB) starts with a probe whose body is a lone flush;
// it goes on, and the push with it.
func TestGitRemoteLargePush(t *testing.T) {
	repo := gittest.ServeWith(t, gittest.Options{Path: "r.git", Files: map[string]string{"a": "a"}, Push: true})
	p, proxyURL, _ := serveProxy(t, Options{Git: &Remote{URL: repo.URL, Protected: []string{"main"}, BranchPrefix: "logbook/"}})
	pu, _ := url.Parse(proxyURL)
	rewrite := []string{"GIT_CONFIG_COUNT=1", "GIT_CONFIG_KEY_0=url.http://" + pu.Host + p.GitPath() + ".insteadOf", "GIT_CONFIG_VALUE_0=" + repo.URL}
	work := filepath.Join(t.TempDir(), "w")
	if out, err := hostGit(t, "", rewrite, "clone", "-q", repo.URL, work); err != nil {
		t.Fatalf("clone: %v\n%s", err, out)
	}
	big := make([]byte, 3<<20)
	for i := range big {
		big[i] = byte(i*7919 + i>>8) // compresses badly
	}
	if err := os.WriteFile(filepath.Join(work, "big.bin"), big, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"add", "big.bin"}, {"commit", "-q", "-m", "big"}, {"push", "-q", "origin", "HEAD:refs/heads/logbook/big"}} {
		if out, err := hostGit(t, work, rewrite, args...); err != nil {
			t.Fatalf("%v: %v\n%s", args, err, out)
		}
	}
	if repo.Branch("logbook/big") == "" {
		t.Fatal("the large push did not arrive")
	}
}

// A command list over its bounds is refused at once, without holding it.
func TestGitRemoteBoundsThePushCommands(t *testing.T) {
	repo := gittest.ServeWith(t, gittest.Options{Path: "r.git", Files: map[string]string{"a": "a"}, Push: true})
	p, proxyURL, rec := serveProxy(t, Options{Git: &Remote{URL: repo.URL}})
	pu, _ := url.Parse(proxyURL)
	zero := strings.Repeat("0", 40)
	line := func(ref string) string {
		return fmt.Sprintf("%04x%s %s %s\n", len(zero)*2+len(ref)+7, zero, "1"+zero[1:], ref)
	}
	for name, body := range map[string]string{
		"too many refs":  strings.Repeat(line("refs/heads/logbook/x"), maxCommands+1) + "0000",
		"too long a ref": line("refs/heads/"+strings.Repeat("x", maxRefLength)) + "0000",
		"too much":       strings.Repeat(line("refs/heads/"+strings.Repeat("y", 900)), 300) + "0000",
		"no flush":       line("refs/heads/logbook/x"),
		"not pkt-lines":  "hello world",
		// What the proxy would read one way and receive-pack another.
		"two spaces":       pkt(zero+"  "+"1"+zero[1:]+" refs/heads/logbook/x\x00report-status\n") + "0000",
		"a tab":            pkt(zero+" "+"1"+zero[1:]+"\trefs/heads/logbook/x\x00report-status\n") + "0000",
		"a trailing space": pkt(zero+" "+"1"+zero[1:]+" refs/heads/logbook/x \x00report-status\n") + "0000",
		"not an id":        pkt("main "+"1"+zero[1:]+" refs/heads/logbook/x\x00report-status\n") + "0000",
	} {
		resp, err := http.Post("http://"+pu.Host+p.GitPath()+"/git-receive-pack", "application/x-git-receive-pack-request", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden {
			t.Errorf("%s: %s", name, resp.Status)
		}
	}
	// Two encodings: the one the proxy would read might not be the one the repository does.
	req, _ := http.NewRequest(http.MethodPost, "http://"+pu.Host+p.GitPath()+"/git-receive-pack", strings.NewReader(pkt(zero+" "+"1"+zero[1:]+" refs/heads/logbook/x\x00report-status\n")+"0000"))
	req.Header["Content-Encoding"] = []string{"identity", "gzip"}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("two encodings: %s", resp.Status)
	}
	for _, r := range rec.all() {
		if r.Allowed || !strings.HasPrefix(r.Reason, "push refused") || len(r.Reason) > maxRecordText || len(r.Refs) > maxRecordRefs+1 {
			t.Errorf("record: allowed %v, reason %q (%d bytes), %d refs", r.Allowed, clip.Text(r.Reason, maxRecordText), len(r.Reason), len(r.Refs))
		}
	}
}

// Past maxRecords, a sandbox's connections are summed up in one record per kind and verdict,
// given at Close: a flood of connections cannot flood the log.
func TestRecordsSummedUpPastTheirBound(t *testing.T) {
	p, proxyURL, rec := serveProxy(t, Options{})
	for i := 0; i < maxRecords+5; i++ {
		status, c, _ := connectThrough(t, proxyURL, "example.com:443")
		c.Close()
		if !strings.HasPrefix(status, "403") {
			t.Fatalf("connection %d: %s", i, status)
		}
	}
	if n := len(rec.all()); n != maxRecords {
		t.Fatalf("%d records before Close; want %d", n, maxRecords)
	}
	p.Close()
	got := rec.all()
	if len(got) != maxRecords+1 || !strings.HasPrefix(got[maxRecords].Reason, "5 more connections like this") {
		t.Fatalf("%d records; the last %+v", len(got), got[len(got)-1])
	}
}

func TestPublicAddresses(t *testing.T) {
	for addr, want := range map[string]bool{
		"140.82.112.3": true, "2606:4700::6810:84e5": true,
		"127.0.0.1": false, "10.0.0.1": false, "169.254.169.254": false, "100.64.0.1": false,
		"192.0.0.8": false, "198.18.0.1": false, "240.0.0.1": false, "255.255.255.255": false,
		"192.0.2.1": false, "::1": false, "fd00::1": false, "fe80::1": false, "fec0::1": false,
		"64:ff9b::a9fe:a9fe": false, "64:ff9b::8c52:7003": true, "2002:7f00:1::": false,
		"::10.0.0.1": false, "::ffff:127.0.0.1": false,
	} {
		if got := public(netip.MustParseAddr(addr)); got != want {
			t.Errorf("public(%s) = %v, want %v", addr, got, want)
		}
	}
}

// A session may update only the logbook/ branches it pushed (now, or in an earlier sandbox:
// Remote.Owned); another session's existing branch is refused, a new one is fine.
func TestGitRemotePushesOnlyItsOwnBranches(t *testing.T) {
	repo := gittest.ServeWith(t, gittest.Options{Path: "r.git", Files: map[string]string{"a": "a"}, Push: true})
	clone := func(p *Proxy, proxyURL string) (string, []string) {
		pu, _ := url.Parse(proxyURL)
		rewrite := []string{"GIT_CONFIG_COUNT=1", "GIT_CONFIG_KEY_0=url.http://" + pu.Host + p.GitPath() + ".insteadOf", "GIT_CONFIG_VALUE_0=" + repo.URL}
		work := filepath.Join(t.TempDir(), "w")
		if out, err := hostGit(t, "", rewrite, "clone", "-q", repo.URL, work); err != nil {
			t.Fatalf("clone: %v\n%s", err, out)
		}
		return work, rewrite
	}
	push := func(work string, rewrite []string, msg, ref string, force bool) (string, error) {
		if out, err := hostGit(t, work, rewrite, "commit", "-q", "--allow-empty", "-m", msg); err != nil {
			t.Fatalf("commit: %v\n%s", err, out)
		}
		args := []string{"push", "origin", "HEAD:" + ref}
		if force {
			args = append(args, "--force")
		}
		return hostGit(t, work, rewrite, args...)
	}
	remote := func(owned ...string) *Remote {
		return &Remote{URL: repo.URL, Protected: []string{"main"}, BranchPrefix: "logbook/", Owned: owned}
	}
	pa, urlA, _ := serveProxy(t, Options{Git: remote()})
	workA, rwA := clone(pa, urlA)
	if out, err := push(workA, rwA, "a1", "refs/heads/logbook/a", false); err != nil {
		t.Fatalf("a new branch: %v\n%s", err, out)
	}
	if out, err := push(workA, rwA, "a2", "refs/heads/logbook/a", true); err != nil {
		t.Fatalf("its own branch again: %v\n%s", err, out)
	}
	pb, urlB, _ := serveProxy(t, Options{Git: remote()})
	workB, rwB := clone(pb, urlB)
	if out, err := push(workB, rwB, "b1", "refs/heads/logbook/a", true); err == nil || !strings.Contains(out, "logbook/a exists and was not pushed from this thread") {
		t.Fatalf("another session's branch: %v\n%s", err, out)
	}
	if out, err := push(workB, rwB, "b2", "refs/heads/logbook/b", false); err != nil {
		t.Fatalf("a new branch of its own: %v\n%s", err, out)
	}
	// A's next sandbox knows its branch from the log.
	pa2, urlA2, _ := serveProxy(t, Options{Git: remote("logbook/a")})
	workA2, rwA2 := clone(pa2, urlA2)
	if out, err := push(workA2, rwA2, "a3", "refs/heads/logbook/a", true); err != nil {
		t.Fatalf("its own branch from a new sandbox: %v\n%s", err, out)
	}
}
