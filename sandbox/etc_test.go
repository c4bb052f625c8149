package sandbox

import (
	"os"
	"strings"
	"testing"
)

func TestBwrapSeesMinimalEtc(t *testing.T) {
	t.Parallel()
	script := `cat /etc/passwd; echo ==; cat /etc/group; echo ==; cat /etc/hosts; echo ==; id -un; id -gn; echo ==
for f in /etc/shadow /etc/gshadow /etc/resolv.conf /etc/ssl/private /etc/sudoers /etc/hostname /etc/machine-id; do [ -e $f ] && echo present $f; done; echo ==
ls /etc/ssl/certs | head -1`
	offline, _ := mustProvider(t, KindBwrap, nil)
	res := mustExec(t, mustProvision(t, offline, "etc", Recipe{}), ExecRequest{Shell: script})
	parts := strings.Split(res.Stdout, "==\n")
	if res.ExitCode != 0 || len(parts) != 6 {
		t.Fatalf("etc probe: %+v", res)
	}
	passwd, group, hosts, ids, present, certs := parts[0], parts[1], parts[2], parts[3], parts[4], parts[5]
	for _, line := range strings.Split(strings.TrimSpace(passwd), "\n") {
		name, _, _ := strings.Cut(line, ":")
		if name != "sandbox" && name != "nobody" {
			t.Errorf("/etc/passwd holds a host account %q:\n%s", name, passwd)
		}
	}
	if !strings.HasPrefix(passwd, "sandbox:x:") {
		t.Errorf("/etc/passwd lacks the sandbox user:\n%s", passwd)
	}
	for _, line := range strings.Split(strings.TrimSpace(group), "\n") {
		name, _, _ := strings.Cut(line, ":")
		if name != "sandbox" && name != "nogroup" {
			t.Errorf("/etc/group holds a host group %q:\n%s", name, group)
		}
	}
	if ids != "sandbox\nsandbox\n" {
		t.Errorf("id -un; id -gn = %q, want the sandbox user and group", ids)
	}
	if !strings.Contains(hosts, "127.0.0.1") || !strings.Contains(hosts, "localhost") {
		t.Errorf("/etc/hosts lacks localhost:\n%s", hosts)
	}
	if present != "" {
		t.Errorf("files of the host's /etc reached the sandbox:\n%s", present)
	}
	if _, err := os.Stat("/etc/ssl/certs"); err == nil && strings.TrimSpace(certs) == "" {
		t.Errorf("no CA certificates in /etc/ssl/certs")
	}

	// With network the resolver configuration is there, read-only.
	if _, err := os.Stat("/etc/resolv.conf"); err != nil {
		t.Skipf("the host has no /etc/resolv.conf: %v", err)
	}
	online, _ := mustProvider(t, KindBwrap, func(c *Config) { c.AllowNetwork = true })
	res = mustExec(t, mustProvision(t, online, "etc-net", Recipe{}), ExecRequest{Shell: "cat /etc/resolv.conf && ! echo x >> /etc/resolv.conf"})
	want, _ := os.ReadFile("/etc/resolv.conf")
	if res.ExitCode != 0 || res.Stdout != string(want) {
		t.Errorf("with network, /etc/resolv.conf = %+v, want the host's %q", res, want)
	}
}

// The generated /etc files reach bwrap on fds 3 and up; the command must
// not inherit them.
func TestBwrapCommandInheritsNoEtcFDs(t *testing.T) {
	t.Parallel()
	p, _ := mustProvider(t, KindBwrap, nil)
	sb := mustProvision(t, p, "fds", Recipe{})
	res := mustExec(t, sb, ExecRequest{Shell: "for fd in 3 4 5 6 7; do [ -e /proc/$$/fd/$fd ] && readlink /proc/$$/fd/$fd; done; true"})
	if res.ExitCode != 0 || strings.Contains(res.Stdout, "pipe:") {
		t.Errorf("a command inherited the /etc input pipes: %+v", res)
	}
}
