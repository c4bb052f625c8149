package grants_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"go.uber.org/goleak"

	"github.com/logbook/logbook/bot"
	"github.com/logbook/logbook/bot/grants"
	"github.com/logbook/logbook/migrations/pgtest"
	"github.com/logbook/logbook/session"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// /logbook grants lists the channel's live grants only (not another channel's, not an expired
// one); revoke is refused to someone who neither granted it nor is an admin, done for the
// grantor (an approval_grant_revoked event with who, in the grant's session) and for an admin,
// and a revoked grant is listed no more.
func TestGrantsListAndRevoke(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, err := session.Connect(ctx, pgtest.New(t), session.PoolOptions{Role: "logbook_app"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	store := session.NewStore(pool, session.Options{})
	now := time.Now()
	grant := func(channel, thread, id, by string, expires time.Time) session.Session {
		s, err := store.Open(ctx, session.ThreadKey{Team: "T1", Channel: channel, ThreadTS: thread})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := store.Append(ctx, s.ID, session.NewEvent{Type: session.TypeApprovalGrant,
			Actor: session.Actor{Kind: session.ActorUser, ID: by}, IdempotencyKey: "approval_grant/" + id,
			Payload: session.ApprovalGrant{ID: id, Rule: "run_command=ask", Tool: "run_command", Channel: channel, ThreadTS: thread,
				CallID: "call_" + id, GrantedBy: []string{by}, ExpiresAt: expires}}); err != nil {
			t.Fatal(err)
		}
		return s
	}
	a := grant("C0000001", "1700000000.000100", "gaaaaaaaa", "U0000001", now.Add(20*time.Minute))
	grant("C0000001", "1700000000.000200", "gbbbbbbbb", "U0000002", now.Add(10*time.Minute))
	grant("C0000001", "1700000000.000300", "gexpired1", "U0000001", now.Add(-time.Minute))
	grant("C0000002", "1700000000.000400", "gother111", "U0000001", now.Add(20*time.Minute))
	run := func(user, args string) string {
		return grants.Run(ctx, store, []string{"U0000009"}, now, zerolog.Nop(), "C0000001", user, args)
	}

	out := run("U0000001", "")
	if !strings.Contains(out, "gaaaaaaaa") || !strings.Contains(out, "gbbbbbbbb") || strings.Contains(out, "gexpired1") || strings.Contains(out, "gother111") {
		t.Fatalf("list:\n%s", out)
	}
	if out := run("U0000002", "revoke gaaaaaaaa"); !strings.Contains(out, "Only who granted it") {
		t.Fatalf("revoke by someone else: %s", out)
	}
	if out := run("U0000001", "revoke gexpired1"); !strings.Contains(out, "already expired") {
		t.Fatalf("revoke an expired grant: %s", out)
	}
	if out := run("U0000001", "revoke gother111"); !strings.Contains(out, "no live grant") {
		t.Fatalf("revoke another channel's grant: %s", out)
	}
	if out := run("U0000001", "revoke gaaaaaaaa"); !strings.Contains(out, "Revoked grant `gaaaaaaaa`") {
		t.Fatalf("revoke by the grantor: %s", out)
	}
	if out := run("U0000001", "revoke gaaaaaaaa"); !strings.Contains(out, "already revoked (by <@U0000001>)") {
		t.Fatalf("revoke twice: %s", out)
	}
	if out := run("U0000009", "revoke gbbbbbbbb"); !strings.Contains(out, "Revoked grant") {
		t.Fatalf("revoke by an admin: %s", out)
	}
	if out := run("U0000001", ""); !strings.Contains(out, "No live approval grants") {
		t.Fatalf("list after the revocations:\n%s", out)
	}
	evs, err := store.Events(ctx, a.ID, session.Range{Types: []session.Type{session.TypeApprovalGrant, session.TypeApprovalGrantRevoked}})
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 2 || evs[1].Actor.ID != "U0000001" {
		t.Fatalf("session A's grant events %+v; want the grant and its revocation by U0000001", evs)
	}
	if g := bot.Grants(evs); len(g) != 1 || !g[0].Revoked || g[0].Live(now) || g[0].RevokedBy != "U0000001" {
		t.Fatalf("the engine's reading of the revoked grant: %+v", g)
	}
	if out := run("U0000001", "revoke"); !strings.Contains(out, "Usage") {
		t.Fatalf("revoke without an id: %s", out)
	}
}
