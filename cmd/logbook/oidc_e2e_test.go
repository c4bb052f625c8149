package main

import (
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/oauth2-proxy/mockoidc"

	"github.com/logbook/logbook/bot/slackemu"
)

// Issue 46: an OIDC issuer that cannot be discovered at start is said at once — an error
// naming the issuer and why — and /readyz is 503 with the reason; serve still starts (it
// connects to Slack), and once the provider answers, the background retry discovers it and
// /readyz is ready.
func TestE2EOIDCUnreachableIssuerSaidAtStartAndInReadyz(t *testing.T) {
	t.Parallel()
	m, err := mockoidc.NewServer(nil)
	if err != nil {
		t.Fatal(err)
	}
	var down atomic.Bool
	down.Store(true)
	if err := m.AddMiddleware(func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if down.Load() {
				http.Error(w, "provider down", http.StatusServiceUnavailable)
				return
			}
			next.ServeHTTP(w, r)
		})
	}); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(ln, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Shutdown() })
	e := newE2E(t, slackemu.Options{})
	p := e.serve("LOGBOOK_OIDC_ISSUER="+m.Issuer(), "LOGBOOK_OIDC_CLIENT_ID="+m.ClientID, "LOGBOOK_OIDC_CLIENT_SECRET="+m.ClientSecret,
		"LOGBOOK_OIDC_ROLES=*=reader", "LOGBOOK_OIDC_REDIRECT_URL=http://127.0.0.1:1/oidc/callback")
	e.waitFor("the start-up error naming the issuer", func() bool {
		out := p.out.String()
		return strings.Contains(out, "OIDC sign-in does NOT work") && strings.Contains(out, `"issuer":"`+m.Issuer()+`"`)
	})
	base := "http://" + e.httpAddr(p)
	code, body := get(t, base+"/readyz")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "OIDC sign-in is not ready") || !strings.Contains(body, m.Issuer()) {
		t.Fatalf("/readyz with the issuer down: %d %q, want 503 naming the issuer", code, body)
	}
	down.Store(false)
	e.waitFor("/readyz to answer ready once the provider answers", func() bool { c, _ := get(t, base+"/readyz"); return c == http.StatusOK })
	if !strings.Contains(p.out.String(), "sign-in works now") {
		t.Errorf("no line saying sign-in works now")
	}
}
