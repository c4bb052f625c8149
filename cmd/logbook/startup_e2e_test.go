package main

import (
	"context"
	"io"
	"net/http"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/logbook/logbook/bot/brain/fakeprovider"
	"github.com/logbook/logbook/bot/slackemu"
	"github.com/logbook/logbook/cmd/logbook/localpg"
)

// The start-up tests of issue 33 run the real binary against a throwaway cluster of their own
// (localpg under t.TempDir()): the shared server is never stopped or reconfigured.

// get answers GET url's status and body.
func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := (&http.Client{Timeout: 3 * time.Second}).Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// Issue 33: a replica whose database is down at start does not exit. It retries with
// backoff, saying why in its log; /healthz answers (alive) and /readyz is 503 with the reason;
// once the database comes up it becomes ready and answers, and logs its connection budget.
func TestE2EStartsBeforeItsDatabase(t *testing.T) {
	t.Parallel()
	e := newE2E(t, slackemu.Options{})
	pg := outageCluster(t, e)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := pg.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	e.model.Push(fakeprovider.Reply{Text: "Up at last."})
	p := e.startServe("LOGBOOK_LOG_LEVEL=info")
	e.waitFor("a second attempt at the database", func() bool {
		return strings.Count(p.out.String(), "the database is unreachable; not ready, retrying") >= 2
	})
	select {
	case <-p.done:
		t.Fatalf("serve exited while the database was down:\n%s", p.out.String())
	default:
	}
	m := regexp.MustCompile(`"addr":"([^"]+)"[^\n]*http: /healthz`).FindStringSubmatch(p.out.String())
	if m == nil {
		t.Fatalf("no http address before the database answered:\n%s", p.out.String())
	}
	base := "http://" + m[1]
	if code, body := get(t, base+"/healthz"); code != http.StatusOK {
		t.Errorf("/healthz while the database is down: %d %q, want 200 (alive)", code, body)
	}
	code, body := get(t, base+"/readyz")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "starting: database: the database is unreachable (attempt") {
		t.Errorf("/readyz while the database is down: %d %q, want 503 with the reason", code, body)
	}
	if strings.Contains(p.out.String(), "database connections: budget") {
		t.Errorf("a budget logged before the database answered")
	}

	again, err := localpg.Start(ctx, localpg.Options{Dir: pg.Dir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { again.Stop(context.Background()) })
	e.waitFor("/readyz to answer ready", func() bool { c, _ := get(t, base+"/readyz"); return c == http.StatusOK })
	out := p.out.String()
	if !strings.Contains(out, `"per_replica":{"main":8,"gateway":4,"listen":1}`) ||
		!strings.Contains(out, `"formula":"LOGBOOK_REPLICAS 1 × (main 8 + gateway 4 + listen 1) + LOGBOOK_DB_RESERVE 6 = 19"`) {
		t.Errorf("no budget line with the formula:\n%s", out)
	}
	r := e.post(slackemu.Post{Channel: general, User: ada, Text: mention("are you up?")})
	e.waitFor("the reply", func() bool { return finalReplies(e, r.TS) == 1 })
}

// Issue 33: a fleet that cannot fit in the server's connections is refused at start, with
// the formula and the numbers in the message. The cluster's max_connections is 30: 27 for
// ordinary clients; two default replicas need 2 × 14 + 6 = 34 (a fleet's replicas watch each other: one more each).
func TestE2EConnectionBudgetRefused(t *testing.T) {
	t.Parallel()
	e := newE2E(t, slackemu.Options{})
	pg := outageCluster(t, e)
	admin, err := pgx.Connect(context.Background(), pg.URL())
	if err != nil {
		t.Fatal(err)
	}
	_, err = admin.Exec(context.Background(), `ALTER SYSTEM SET max_connections = 30`)
	admin.Close(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := pg.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	again, err := localpg.Start(ctx, localpg.Options{Dir: pg.Dir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { again.Stop(context.Background()) })

	cmd := exec.Command(binary, "serve")
	cmd.Env = e.env("LOGBOOK_REPLICAS=2", "LOGBOOK_LOG_LEVEL=info")
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("serve started a fleet that cannot fit:\n%s", out)
	}
	want := "logbook: database connections do not fit: LOGBOOK_REPLICAS 2 × (main 8 + gateway 4 + listen 1 + watch 1) + LOGBOOK_DB_RESERVE 6 = 34 > 27 " +
		"that PostgreSQL lets ordinary clients open (max_connections 30 − superuser_reserved_connections 3 − reserved_connections 0); " +
		"at most 1 replicas fit"
	if !strings.Contains(string(out), want) {
		t.Errorf("the refusal does not spell the formula (want %q):\n%s", want, out)
	}
	if !strings.Contains(string(out), `"need":34`) || !strings.Contains(string(out), `"max_connections":30`) {
		t.Errorf("no budget line before the refusal:\n%s", out)
	}
}
