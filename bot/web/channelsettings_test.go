package web_test

import (
	"encoding/hex"
	"net/http"
	"strings"
	"testing"

	"github.com/logbook/logbook/session"
)

// An auditor sees a channel's effective settings with their sources (ledger with who, how and
// seq; environment; default), the ledger's head and every change; anyone else is refused, and
// the view is in the access log.
func TestChannelSettingsPageIsForAuditors(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	var last session.ChannelSetting
	for _, c := range []session.ChannelSetting{
		{Name: "instructions", New: "Answer in <b>French</b>.", Set: true, SetBy: "U0000001"},
		{Name: "setup", New: "npm ci", Set: true, SetBy: "ops-alice", Via: session.ViaFile},
		{Name: "setup", SetBy: "U0000002"},
	} {
		c.Team, c.Channel = "T0000001", "C0000001" // the team of the fixture's threads there
		var err error
		if last, err = f.store.SetChannelSetting(f.ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	if status, body, _ := f.get("/channels/C0000001/settings", asAlice); status != http.StatusForbidden || strings.Contains(body, "French") {
		t.Fatalf("someone who is not an auditor: %d\n%s", status, body)
	}
	var refused int
	if err := f.admin.QueryRow(f.ctx, `SELECT count(*) FROM access_log WHERE action = 'channel_settings' AND query = 'C0000001' AND status = 403`).Scan(&refused); err != nil || refused != 1 {
		t.Errorf("access log rows of the refused look: %d, %v; want 1", refused, err)
	}
	status, body, _ := f.get("/channels/C0000001/settings", asAuditor)
	if status != http.StatusOK {
		t.Fatalf("status %d: %s", status, body)
	}
	for _, want := range []string{
		"Settings of #general", "seq 3, hash <code>" + hex.EncodeToString(last.Ledger.Hash) + "</code>",
		"<code>anthropic:claude-default</code></td><td>environment: LOGBOOK_MODEL",
		"Answer in &lt;b&gt;French&lt;/b&gt;.", "ledger: U0000001, ", "via slash_command (seq 1)",
		"<code>make</code></td><td>default; reset by U0000002",
		`<td>ops-alice</td><td>file</td><td>setup</td><td>default → &#34;npm ci&#34;</td><td>2</td>`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("the page lacks %q:\n%s", want, body)
		}
	}
	if status, _, _ := f.get("/channels/general/settings", asAuditor); status != http.StatusBadRequest {
		t.Errorf("a name that is not a channel id: %d, want 400", status)
	}
	var n int
	if err := f.admin.QueryRow(f.ctx, `SELECT count(*) FROM access_log WHERE action = 'channel_settings' AND query = 'C0000001' AND results = 3`).Scan(&n); err != nil || n != 1 {
		t.Errorf("access log rows of the view: %d, %v; want 1", n, err)
	}
}
