package sandbox

import (
	"bufio"
	"context"
	"errors"
	"strings"
	"testing"
)

// A started process talks over its stdin and stdout, gets its own env entries (commands do
// not), and dies with the sandbox: closing the sandbox kills it and Close then waits for it.
func TestStartProcessLivesWithTheSandbox(t *testing.T) {
	t.Parallel()
	requireBwrap(t)
	p, _ := mustProvider(t, KindBwrap, nil)
	sb := mustProvision(t, p, "start", Recipe{})
	proc, err := sb.(Starter).Start(context.Background(), StartRequest{
		Argv: []string{"/bin/sh", "-c", `echo "env:$ONLY_HERE"; while read -r line; do echo "got:$line"; done`},
		Env:  []string{"ONLY_HERE=for-this-process"},
	})
	if err != nil {
		t.Fatal(err)
	}
	out := bufio.NewReader(proc.Stdout)
	if line, _ := out.ReadString('\n'); line != "env:for-this-process\n" {
		t.Fatalf("first line %q", line)
	}
	if _, err := proc.Stdin.Write([]byte("hello\n")); err != nil {
		t.Fatal(err)
	}
	if line, _ := out.ReadString('\n'); line != "got:hello\n" {
		t.Fatalf("echoed %q", line)
	}
	if res := mustExec(t, sb, ExecRequest{Shell: "echo \"cmd:$ONLY_HERE\""}); strings.TrimSpace(res.Stdout) != "cmd:" {
		t.Fatalf("a command sees the process's env: %q", res.Stdout)
	}
	if err := sb.Close(); err != nil {
		t.Fatal(err)
	}
	<-proc.Done() // the sandbox's close killed it
	_ = proc.Close()
	if _, err := sb.(Starter).Start(context.Background(), StartRequest{Argv: []string{"true"}}); !errors.Is(err, ErrLost) {
		t.Fatalf("start in a closed sandbox: %v", err)
	}
	if _, err := sb.(Starter).Start(context.Background(), StartRequest{Argv: []string{"true"}, Env: []string{"BAD"}}); err == nil {
		t.Fatal("an env entry without = was accepted")
	}
}
