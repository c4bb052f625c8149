package session_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/logbook/logbook/session"
)

// tamper runs sql on pool with every trigger off, as a superuser could.
func tamperAsSuperuser(t *testing.T, pool *pgxpool.Pool, sql string) {
	t.Helper()
	err := pgx.BeginFunc(context.Background(), pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(context.Background(), `SET LOCAL session_replication_role = replica`); err != nil {
			return err
		}
		tag, err := tx.Exec(context.Background(), sql)
		if err == nil && tag.RowsAffected() == 0 {
			t.Fatalf("%s changed nothing", sql)
		}
		return err
	})
	if err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// Issue 49: rebuilding projections rewrites append-only tables behind their triggers, so the
// application's role is refused with ErrRebuildForbidden naming the role, and nothing changes.
func TestRebuildProjectionsRefusesARoleThatMayNotRewrite(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, dbURL := newStore(t)
	su := superuser(t, dbURL)
	if _, err := st.SetChannelSetting(ctx, session.ChannelSetting{Team: "T1", Channel: "C0000009", Name: "model", New: "m", Set: true, SetBy: "U1"}); err != nil {
		t.Fatal(err)
	}
	tamperAsSuperuser(t, su, `UPDATE channel_settings SET value = 'evil'`)
	_, err := st.RebuildProjections(ctx, "C0000009", false)
	if !errors.Is(err, session.ErrRebuildForbidden) || !strings.Contains(err.Error(), "logbook_app") {
		t.Fatalf("rebuild as logbook_app: %v; want ErrRebuildForbidden naming the role", err)
	}
	var value string
	if err := su.QueryRow(ctx, `SELECT value FROM channel_settings`).Scan(&value); err != nil || value != "evil" {
		t.Errorf("after the refused rebuild the setting is %q (%v); want it untouched", value, err)
	}
	// A dry run only reads: the application's role may run it.
	r, err := st.RebuildProjections(ctx, "C0000009", true)
	if err != nil || len(r.Findings) != 1 || r.Findings[0].Change != "setting_changed 1" || r.Rows != 0 {
		t.Errorf("dry run as logbook_app: %+v, %v; want the one finding", r, err)
	}
	if _, err := st.RebuildProjections(ctx, "C0000404", true); !errors.Is(err, session.ErrNotFound) {
		t.Errorf("rebuild of a channel with no ledger: %v; want ErrNotFound", err)
	}
}

// Issue 49: what the ledger cannot give back is not invented: a connector whose row is gone
// stays missing (its sealed token is never in the ledger) and is reported; a purged note
// whose row is gone comes back purged, from its event's header.
func TestRebuildProjectionsNeverInventsAToken(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, dbURL := newStore(t)
	su := superuser(t, dbURL)
	st := session.NewStore(su, session.Options{})
	const ch = "C0000009"
	if err := st.ConnectMCP(ctx, session.MCPToken{Server: "docs", Channel: ch, Sealed: []byte{1, 2}, ConnectedBy: "ada@example.com", ConnectedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	note, err := st.AddNote(ctx, session.Note{Team: "T1", Channel: ch, Text: "deploys on Tuesdays", ByKind: session.NoteByUser, By: "U1"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := su.Exec(ctx, `SELECT logbook_purge_memory(clock_timestamp())`); err != nil {
		t.Fatal(err)
	}
	tamperAsSuperuser(t, su, `DELETE FROM mcp_tokens`)
	tamperAsSuperuser(t, su, `DELETE FROM channel_memory`)

	r, err := st.RebuildProjections(ctx, ch, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Unrebuilt) != 1 || !strings.HasPrefix(r.Unrebuilt[0].Change, "connector_connected connect/docs/") ||
		!strings.Contains(r.Unrebuilt[0].Reason, "mcp_tokens row of the event is missing") {
		t.Errorf("unrebuilt: %+v; want the connector's missing row", r.Unrebuilt)
	}
	var tokens int
	if err := su.QueryRow(ctx, `SELECT count(*) FROM mcp_tokens`).Scan(&tokens); err != nil || tokens != 0 {
		t.Errorf("%d mcp_tokens rows after the rebuild (%v); want none invented", tokens, err)
	}
	var text *string
	var by string
	var purged *time.Time
	if err := su.QueryRow(ctx, `SELECT text, by_id, purged_at FROM channel_memory WHERE id = $1`, note.ID).Scan(&text, &by, &purged); err != nil {
		t.Fatalf("the purged note's row: %v", err)
	}
	if text != nil || by != "U1" || purged == nil {
		t.Errorf("the purged note came back as text %v, by %q, purged at %v; want no text, by U1, purged", text, by, purged)
	}
	fs, err := st.CheckLedgers(ctx, ch)
	if err != nil || len(fs) != 1 || !strings.HasPrefix(fs[0].Change, "connector_connected") {
		t.Errorf("check after the rebuild: %v %v; want only the connector", fs, err)
	}
}

// A review found that one channel's ledger could rewrite another channel's row: the upserts
// take a row's id from the event's key, so an event appended to A's ledger (by whoever holds
// the application's role) keyed to B's setting moved B's row into A with its value. The
// rebuild now refuses while a key names a row of another channel, two ledgers hold a key, or
// a key is not its type's — and changes nothing.
func TestRebuildProjectionsRefusesAnEventKeyedToAnotherChannelsRow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, dbURL := newStore(t)
	su := superuser(t, dbURL)
	b, err := st.SetChannelSetting(ctx, session.ChannelSetting{Team: "T1", Channel: "C000000B", Name: "approvals", New: "run_command=ask", Set: true, SetBy: "U1"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.SetChannelSetting(ctx, session.ChannelSetting{Team: "T1", Channel: "C000000A", Name: "model", New: "m", Set: true, SetBy: "U1"}); err != nil {
		t.Fatal(err)
	}
	ledgerA, err := st.Ledger(ctx, "C000000A")
	if err != nil {
		t.Fatal(err)
	}
	allow := "run_command=allow"
	for _, c := range []struct{ name, key string }{{"keyed to B's row", "setting/" + strconv.FormatInt(b.ID, 10)}, {"a key not its type's", "budget/" + strconv.FormatInt(b.ID, 10)}} {
		forged := session.SettingChanged{ID: b.ID, Team: "T1", Name: "approvals", New: &allow, By: "UEVIL", Via: session.ViaSlash, At: time.Now().UTC().Truncate(time.Microsecond)}
		if _, err := st.Append(ctx, ledgerA, session.NewEvent{Type: session.TypeSettingChanged, Actor: session.Actor{Kind: session.ActorUser, ID: "UEVIL"}, IdempotencyKey: c.key, Payload: forged}); err != nil {
			t.Fatal(err)
		}
		for _, scope := range []string{"C000000A", ""} {
			_, err := session.NewStore(su, session.Options{}).RebuildProjections(ctx, scope, false)
			var conflict *session.ConflictingLedgerError
			if !errors.As(err, &conflict) || !strings.Contains(err.Error(), c.key) {
				t.Fatalf("%s: rebuild of %q: %v; want it refused naming %s", c.name, scope, err, c.key)
			}
		}
		var channel, value string
		if err := su.QueryRow(ctx, `SELECT channel, value FROM channel_settings WHERE id = $1`, b.ID).Scan(&channel, &value); err != nil ||
			channel != "C000000B" || value != "run_command=ask" {
			t.Fatalf("%s: B's setting is now %s %q (%v)", c.name, channel, value, err)
		}
	}
}
