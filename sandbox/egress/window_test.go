package egress

import (
	"errors"
	"strings"
	"testing"
)

// TestWidenOpensAWindow: a host off the allowlist is reached while a window names it, and
// refused again once it is closed; one window at a time.
func TestWidenOpensAWindow(t *testing.T) {
	echo := echoServer(t)
	p, proxyURL, _ := serveProxy(t, Options{})
	if status, _, _ := connectThrough(t, proxyURL, echo); !strings.HasPrefix(status, "403") {
		t.Fatalf("before the window: %s", status)
	}
	extra, err := ParseAllowlist(echo)
	if err != nil {
		t.Fatal(err)
	}
	closeWindow, err := p.Widen(extra)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Widen(extra); !errors.Is(err, ErrWidened) {
		t.Errorf("a second window: %v", err)
	}
	status, c, _ := connectThrough(t, proxyURL, echo)
	if !strings.HasPrefix(status, "200") {
		t.Fatalf("in the window: %s", status)
	}
	c.Close()
	closeWindow()
	if status, _, _ := connectThrough(t, proxyURL, echo); !strings.HasPrefix(status, "403") {
		t.Fatalf("after the window: %s", status)
	}
}
