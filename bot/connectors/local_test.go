package connectors_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/logbook/logbook/bot/connectors"
	"github.com/logbook/logbook/sandbox"
	"github.com/logbook/logbook/session/logtest"
)

// bwrapSandbox provisions a bwrap sandbox whose read-only paths add extra (skipped where
// bubblewrap cannot isolate).
func bwrapSandbox(t *testing.T, extra ...string) sandbox.Starter {
	t.Helper()
	if _, err := exec.LookPath("bwrap"); err != nil {
		t.Skip("bubblewrap is not installed")
	}
	ro := append([]string{"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"}, extra...)
	p, err := sandbox.New(sandbox.KindBwrap, sandbox.Config{BaseDir: publicDir(t), ReadOnlyPaths: ro}, zerolog.Nop())
	if err != nil {
		t.Fatalf("bwrap provider: %v", err)
	}
	sb, err := p.Provision(context.Background(), t.Name(), sandbox.Recipe{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sb.Close() })
	return sb.(sandbox.Starter)
}

// publicDir is a temporary directory the sandbox user can search (t.TempDir's is 0700),
// outside /tmp (a sandbox has a /tmp of its own).
func publicDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("/var/tmp", "logbook-mcp-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// publicCopy copies the test binary where the sandbox user can read and run it.
func publicCopy(t *testing.T) string {
	t.Helper()
	dir := publicDir(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "mcp-test-server")
	if err := os.WriteFile(bin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	return bin
}

// TestLocalStdioInSandbox: a local server built with the SDK runs inside the session's
// bwrap sandbox, started on first use, its env passed to it alone; closing the session stops
// it.
func TestLocalStdioInSandbox(t *testing.T) {
	t.Parallel()
	bin := publicCopy(t)
	sb := bwrapSandbox(t, filepath.Dir(bin))
	cfg := `{"mcpServers": {"local": {"command": "` + bin + `", "env": {"` + stdioServerEnv + `": "1"}, "channels": ["C1"]}}}`
	var logs logtest.Buffer
	c := connectors.New(parse(t, cfg, nil), connectors.Options{})
	s := c.Session("C1", "", sb, zerolog.New(&logs))
	tools := s.Tools(context.Background())
	if !strings.Contains(names(tools), "mcp__local__lookup") {
		t.Fatalf("tools = %s; log:\n%s", names(tools), logs.String())
	}
	r := s.Call(context.Background(), "mcp__local__lookup", json.RawMessage(`{"query":"INC-9"}`))
	if r.IsError || !strings.HasPrefix(r.Content, "incident INC-9") {
		t.Errorf("lookup = %+v", r)
	}
	s.Close() // stops the process; goleak checks its waiter is gone
	if r := s.Call(context.Background(), "mcp__local__lookup", nil); !r.IsError {
		t.Errorf("a call after Close = %+v", r)
	}
}

// TestLocalWithoutSandbox: a local server where there is no sandbox is a result saying so.
func TestLocalWithoutSandbox(t *testing.T) {
	t.Parallel()
	c := connectors.New(parse(t, `{"mcpServers": {"local": {"command": "x", "channels": ["C1"]}}}`, nil), connectors.Options{})
	s := c.Session("C1", "", nil, zerolog.Nop())
	defer s.Close()
	if r := s.Call(context.Background(), "mcp__local__x", nil); !r.IsError || !strings.Contains(r.Content, "sandbox") {
		t.Errorf("call = %+v", r)
	}
}

// everythingDefault is where .ci/run installs the reference server's package (npm install
// --prefix): a directory the sandbox user can read, which a home directory is often not.
const everythingDefault = "/var/cache/logbook/npm/node_modules/@modelcontextprotocol/server-everything/dist/index.js"

// everything is the reference server's entry point, @modelcontextprotocol/server-everything
// from npm, installed by .ci/run (LOGBOOK_TEST_MCP_EVERYTHING, else everythingDefault).
func everything(t *testing.T) string {
	t.Helper()
	p := os.Getenv("LOGBOOK_TEST_MCP_EVERYTHING")
	set := p != ""
	if !set {
		p = everythingDefault
	}
	if _, err := os.Stat(p); err != nil {
		if set {
			t.Fatalf("LOGBOOK_TEST_MCP_EVERYTHING=%s: %v", p, err)
		}
		t.Skipf("the reference MCP server is not installed (%v); .ci/run installs it", err)
	}
	if _, err := exec.LookPath("node"); err != nil {
		t.Skip("node is not installed")
	}
	return p
}

// packageRoot is the node_modules directory holding the reference server and its
// dependencies.
func packageRoot(entry string) string {
	dir := entry
	for filepath.Base(dir) != "node_modules" && dir != "/" {
		dir = filepath.Dir(dir)
	}
	return dir
}

// TestEverythingStdioInSandbox: the reference server is listed and called over stdio inside
// a bwrap sandbox; its env (literal, set for it alone) is there, the remote servers' header secret
// is not.
func TestEverythingStdioInSandbox(t *testing.T) {
	t.Parallel()
	entry := everything(t)
	sb := bwrapSandbox(t, packageRoot(entry))
	cfg := `{"mcpServers": {
	  "everything": {"command": "node", "args": ["` + entry + `", "stdio"], "env": {"EVERYTHING_FLAG": "flag-for-everything"}, "channels": ["C1"]},
	  "remote": {"url": "http://127.0.0.1:1/mcp", "headers": {"Authorization": "Bearer ${TOKEN}"}, "channels": ["C2"]}}}`
	c := connectors.New(parse(t, cfg, map[string]string{"TOKEN": headerSecret}),
		connectors.Options{ConnectTimeout: time.Minute})
	s := c.Session("C1", "", sb, zerolog.Nop())
	defer s.Close()
	tools := s.Tools(context.Background())
	if !strings.Contains(names(tools), "mcp__everything__echo") || !strings.Contains(names(tools), "mcp__everything__get-sum") {
		t.Fatalf("tools = %s", names(tools))
	}
	if r := s.Call(context.Background(), "mcp__everything__echo", json.RawMessage(`{"message":"hello from logbook"}`)); r.IsError || !strings.Contains(r.Content, "hello from logbook") {
		t.Errorf("echo = %+v", r)
	}
	if r := s.Call(context.Background(), "mcp__everything__get-sum", json.RawMessage(`{"a":2,"b":40}`)); r.IsError || !strings.Contains(r.Content, "42") {
		t.Errorf("get-sum = %+v", r)
	}
	r := s.Call(context.Background(), "mcp__everything__get-env", nil)
	// The server has its env (literal: logbook's environment never reaches a local server),
	// and never the remote servers' header secret.
	if r.IsError || !strings.Contains(r.Content, `"EVERYTHING_FLAG": "flag-for-everything"`) || strings.Contains(r.Content, headerSecret) {
		t.Errorf("get-env = %+v", r)
	}
	// Nothing else of the sandbox sees the server's env or the header secret.
	res, err := sb.(sandbox.Sandbox).Exec(context.Background(), sandbox.ExecRequest{Shell: "env; cat /proc/*/environ 2>/dev/null | tr '\\0' '\\n'"})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(res.Stdout, headerSecret) || strings.Contains(res.Stdout, "flag-for-everything") {
		t.Errorf("a command of the sandbox sees the connectors' values:\n%s", res.Stdout)
	}
}

// TestEverythingStreamableHTTP: the reference server is listed and called over streamable
// HTTP, as a remote server.
func TestEverythingStreamableHTTP(t *testing.T) {
	t.Parallel()
	entry := everything(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	cmd := exec.Command("node", entry, "streamableHttp")
	cmd.Env = append(os.Environ(), fmt.Sprintf("PORT=%d", port))
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	listening := make(chan struct{})
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if strings.Contains(sc.Text(), "listening on port") {
				close(listening)
				break
			}
		}
		_, _ = io.Copy(io.Discard, stderr)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-drained
		_ = cmd.Wait()
	})
	select {
	case <-listening:
	case <-drained:
		t.Fatal("the reference server exited before it listened")
	case <-time.After(time.Minute):
		t.Fatal("the reference server did not listen within a minute")
	}
	cfg := fmt.Sprintf(`{"mcpServers": {"everything": {"url": "http://127.0.0.1:%d/mcp", "channels": ["C1"]}}}`, port)
	c := connectors.New(parse(t, cfg, nil), connectors.Options{})
	s := c.Session("C1", "", nil, zerolog.Nop())
	defer s.Close()
	if got := names(s.Tools(context.Background())); !strings.Contains(got, "mcp__everything__echo") {
		t.Fatalf("tools = %s", got)
	}
	if r := s.Call(context.Background(), "mcp__everything__echo", json.RawMessage(`{"message":"over http"}`)); r.IsError || !strings.Contains(r.Content, "over http") {
		t.Errorf("echo = %+v", r)
	}
}
