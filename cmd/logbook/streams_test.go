package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/logbook/logbook/bot/stream/webhooks"
	"github.com/logbook/logbook/migrations/pgtest"
	"github.com/logbook/logbook/session"
)

// `logbook webhooks failed` lists the dead letters, `redeliver` sends them again signed with
// their original id and marks them; `audit tail --json` prints the export's lines of the last
// events and records the read.
func TestWebhooksFailedRedeliverAndAuditTail(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.New(t)
	ctx := context.Background()
	pool, err := session.Connect(ctx, dbURL, session.PoolOptions{Role: "logbook_app"})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	store := session.NewStore(pool, session.Options{})
	s, err := store.Open(ctx, session.ThreadKey{Team: "T0000001", Channel: "C0000001", ThreadTS: "1700000000.000100"})
	if err != nil {
		t.Fatal(err)
	}
	user := session.Actor{Kind: session.ActorUser, ID: "U0000001"}
	evs, err := store.Append(ctx, s.ID, session.NewEvent{Type: session.TypeUserMessage, Actor: user, Payload: session.UserMessage{Text: "hello"}},
		session.NewEvent{Type: session.TypeApprovalRequested, Actor: user, Payload: session.ApprovalRequested{CallID: "c1", Tool: "run_command"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.RecordDeadLetter(ctx, session.DeadLetter{Sink: "oncall", Session: s.ID, Seq: 2, EventType: session.TypeApprovalRequested,
		WebhookType: webhooks.ApprovalRequested, Attempts: 7, LastError: "POST: the receiver answered 500"}); err != nil {
		t.Fatal(err)
	}

	secret := "whsec_" + base64.StdEncoding.EncodeToString([]byte("thirty-two bytes of a webhook key"))
	var mu sync.Mutex
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		err := webhooks.Verify(secret, r.Header.Get("webhook-id"), r.Header.Get("webhook-timestamp"), r.Header.Get("webhook-signature"), body, time.Now(), time.Minute)
		if err != nil {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		var d struct{ Type string }
		_ = json.Unmarshal(body, &d)
		mu.Lock()
		got = append(got, r.Header.Get("webhook-id")+" "+d.Type)
		mu.Unlock()
	}))
	defer srv.Close()
	vars := map[string]string{"DATABASE_URL": dbURL, "USER": "op", "ONCALL_SECRET": secret,
		"LOGBOOK_WEBHOOKS": `{"oncall": {"url": "` + srv.URL + `", "secret": "${ONCALL_SECRET}"}}`}

	err, _, out, stderr := runCLI(t, vars, "webhooks", "failed")
	if err != nil || !strings.Contains(out, "oncall") || !strings.Contains(out, s.ID.String()+".2") || !strings.Contains(out, "approval.requested") ||
		!strings.Contains(out, "answered 500") {
		t.Fatalf("webhooks failed: %v\n%s%s", err, out, stderr)
	}
	if err, code, _, _ := runCLI(t, vars, "webhooks", "redeliver"); code != 2 {
		t.Fatalf("redeliver without ids or --all: %v (exit %d), want a usage error", err, code)
	}
	err, _, out, stderr = runCLI(t, vars, "webhooks", "redeliver", "--all")
	if err != nil || !strings.Contains(out, "delivered") {
		t.Fatalf("webhooks redeliver --all: %v\n%s%s", err, out, stderr)
	}
	mu.Lock()
	if len(got) != 1 || got[0] != s.ID.String()+".2 approval.requested" {
		t.Errorf("the receiver got %v, want %s.2 approval.requested", got, s.ID)
	}
	mu.Unlock()
	if err, _, out, _ := runCLI(t, vars, "webhooks", "failed"); err != nil || strings.Contains(out, s.ID.String()) {
		t.Fatalf("webhooks failed after the redelivery: %v\n%s", err, out)
	}
	if err, _, out, _ := runCLI(t, vars, "webhooks", "failed", "--all"); err != nil || !strings.Contains(out, s.ID.String()+".2") {
		t.Fatalf("webhooks failed --all after the redelivery: %v\n%s", err, out)
	}

	// audit tail: the last event (events are readable once no older transaction runs, which a
	// transaction of another test's database on the server can delay: wait for it).
	deadline := time.Now().Add(3 * time.Minute)
	for {
		err, _, out, stderr = runCLI(t, vars, "audit", "tail", "-n", "1", "--json")
		if err != nil {
			t.Fatalf("audit tail: %v\n%s", err, stderr)
		}
		if out != "" || time.Now().After(deadline) {
			break
		}
	}
	var line map[string]any
	if err := json.Unmarshal([]byte(out), &line); err != nil || strings.Count(out, "\n") != 1 {
		t.Fatalf("audit tail -n 1 --json printed %q (%v), want one JSON line", out, err)
	}
	if line["session_id"] != s.ID.String() || line["seq"] != float64(2) || line["hash"] != hexString(evs[1].Hash) || line["channel_id"] != "C0000001" {
		t.Errorf("audit tail's line %v, want event 2 of %s with its hash", line, s.ID)
	}
	su, err := session.Connect(ctx, dbURL, session.PoolOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer su.Close()
	var tails int
	if err := su.QueryRow(ctx, `SELECT count(*) FROM audit_access WHERE action = 'tail'`).Scan(&tails); err != nil {
		t.Fatal(err)
	}
	if tails == 0 {
		t.Error("audit tail is not in the access records")
	}
}

func hexString(b []byte) string {
	const digits = "0123456789abcdef"
	out := make([]byte, 0, 2*len(b))
	for _, c := range b {
		out = append(out, digits[c>>4], digits[c&0xf])
	}
	return string(out)
}
