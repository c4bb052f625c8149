package audit_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/logbook/logbook/audit"
	"github.com/logbook/logbook/session"
)

func mustKey(t *testing.T) ([]byte, []byte) {
	t.Helper()
	priv, pub, err := audit.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	return priv, pub
}

func TestSignedExportFailsOnAnyChangedByte(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	s := f.open(t, "C0000001", "1700000000.000100")
	first := f.append(t, s.ID, alice, session.TypeUserMessage, map[string]any{"text": "one"})
	f.append(t, s.ID, botA, session.TypeAssistantMessage, map[string]any{"text": "two"})
	to := f.dbNow(t)

	privPEM, pubPEM := mustKey(t)
	priv, err := audit.ParsePrivateKey(privPEM)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := audit.ParsePublicKey(pubPEM)
	if err != nil {
		t.Fatal(err)
	}
	_, otherPubPEM := mustKey(t)
	otherPub, _ := audit.ParsePublicKey(otherPubPEM)

	exp := audit.NewExporter(f.auditor, f.auditorPool, audit.ExporterOptions{SigningKey: priv, Settle: 1})
	bucket, dir := newBucket(t)
	if _, err := exp.Export(ctx, audit.Query{From: first.CreatedAt, To: to}, bucket, "signed"); err != nil {
		t.Fatal(err)
	}
	check, err := audit.VerifyExport(ctx, bucket, "signed", pub)
	if err != nil || !check.SignatureValid {
		t.Fatalf("untouched signed export: %+v, %v", check, err)
	}
	if _, err := audit.VerifyExport(ctx, bucket, "signed", nil); !errors.Is(err, audit.ErrInvalid) {
		t.Errorf("signed export without a public key: %v, want ErrInvalid (refuse to half-check)", err)
	}
	if _, err := audit.VerifyExport(ctx, bucket, "signed", otherPub); !errors.Is(err, audit.ErrTampered) {
		t.Errorf("signed export with another key: %v, want ErrTampered", err)
	}

	for _, name := range []string{"events.jsonl", "access.jsonl", audit.ManifestName, audit.SignatureName} {
		path := filepath.Join(dir, "signed", name)
		orig, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, at := range []int{0, len(orig) / 2, len(orig) - 2} {
			if at < 0 || len(orig) == 0 {
				continue
			}
			flipped := append([]byte(nil), orig...)
			flipped[at] ^= 0x01
			if err := os.WriteFile(path, flipped, 0o644); err != nil {
				t.Fatal(err)
			}
			if _, err := audit.VerifyExport(ctx, bucket, "signed", pub); !errors.Is(err, audit.ErrTampered) {
				t.Errorf("byte %d of %s flipped: verify says %v, want ErrTampered", at, name, err)
			}
		}
		if err := os.WriteFile(path, orig, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// A file added to the export, and one removed.
	extra := filepath.Join(dir, "signed", "extra.jsonl")
	if err := os.WriteFile(extra, []byte("{}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := audit.VerifyExport(ctx, bucket, "signed", pub); !errors.Is(err, audit.ErrTampered) {
		t.Errorf("extra file: %v, want ErrTampered", err)
	}
	os.Remove(extra)
	if err := os.Remove(filepath.Join(dir, "signed", "access.jsonl")); err != nil {
		t.Fatal(err)
	}
	if _, err := audit.VerifyExport(ctx, bucket, "signed", pub); !errors.Is(err, audit.ErrTampered) {
		t.Errorf("missing file: %v, want ErrTampered", err)
	}
}

// tamper runs stmt as the superuser with the append-only triggers disabled for the
// transaction, as an attacker with full database access would.
func tamper(t *testing.T, f fixture, stmt string, args ...any) {
	t.Helper()
	ctx := context.Background()
	err := pgx.BeginFunc(ctx, f.su, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SET LOCAL session_replication_role = replica"); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, stmt, args...)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestVerifyNamesTheFirstBrokenSessionAndSeq(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	good := f.open(t, "C0000001", "1700000000.000100")
	bad := f.open(t, "C0000001", "1700000000.000200")
	gap := f.open(t, "C0000001", "1700000000.000300")
	for i := range 5 {
		f.append(t, good.ID, alice, session.TypeUserMessage, map[string]any{"i": i})
		f.append(t, bad.ID, alice, session.TypeUserMessage, map[string]any{"i": i})
		f.append(t, gap.ID, alice, session.TypeUserMessage, map[string]any{"i": i})
	}
	v := audit.NewVerifier(f.auditor)
	r, err := v.Verify(ctx, audit.VerifyOptions{})
	if err != nil || !r.OK() || r.Sessions != 3 || r.Events != 15 {
		t.Fatalf("untouched log: %+v, %v", r, err)
	}
	tamper(t, f, `UPDATE events SET payload = '{"i": 99}' WHERE session_id = $1 AND seq = 3`, bad.ID)
	tamper(t, f, `DELETE FROM events WHERE session_id = $1 AND seq = 4`, gap.ID)

	r, err = v.Verify(ctx, audit.VerifyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Findings) != 2 || r.Findings[0].Session != bad.ID || r.Findings[0].Seq != 3 ||
		r.Findings[1].Session != gap.ID || r.Findings[1].Seq != 5 {
		t.Fatalf("findings %+v; want %s at 3 then %s at 5", r.Findings, bad.ID, gap.ID)
	}
	if err := r.Err(); !errors.Is(err, audit.ErrTampered) || !strings.Contains(err.Error(), bad.ID.String()) ||
		!strings.Contains(err.Error(), "seq 3") {
		t.Errorf("report error %v does not name the first broken session and seq", err)
	}
	one, err := v.Verify(ctx, audit.VerifyOptions{Session: good.ID})
	if err != nil || !one.OK() || one.Sessions != 1 {
		t.Errorf("--session of an intact session: %+v, %v", one, err)
	}
	if _, err := v.Verify(ctx, audit.VerifyOptions{Session: session.ID{1}}); !errors.Is(err, audit.ErrNotFound) {
		t.Errorf("unknown session: %v, want ErrNotFound", err)
	}
	future, err := v.Verify(ctx, audit.VerifyOptions{Since: f.dbNow(t)})
	if err != nil || future.Sessions != 0 {
		t.Errorf("--since now: %+v, %v; want no sessions", future, err)
	}
}

func TestCheckpointDetectsAConsistentRewrite(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	s := f.open(t, "C0000001", "1700000000.000100")
	other := f.open(t, "C0000001", "1700000000.000200")
	for i := range 4 {
		f.append(t, s.ID, alice, session.TypeUserMessage, map[string]any{"text": "original", "i": i})
		f.append(t, other.ID, bob, session.TypeUserMessage, map[string]any{"i": i})
	}
	v := audit.NewVerifier(f.auditor)
	cp, err := v.TakeCheckpoint(ctx)
	if err != nil || len(cp.Heads) != 2 {
		t.Fatalf("checkpoint %+v, %v", cp, err)
	}
	privPEM, pubPEM := mustKey(t)
	priv, _ := audit.ParsePrivateKey(privPEM)
	pub, _ := audit.ParsePublicKey(pubPEM)
	bucket, dir := newBucket(t)
	if err := audit.WriteCheckpoint(ctx, bucket, "cp/1.json", cp, priv); err != nil {
		t.Fatal(err)
	}
	// The session goes on after the checkpoint: still fine.
	f.append(t, s.ID, alice, session.TypeUserMessage, map[string]any{"text": "later"})

	// A superuser rewrites seq 2's payload and recomputes every hash from there on.
	tamper(t, f, `
DO $$
DECLARE r record; prev bytea;
BEGIN
  UPDATE events SET payload = '{"text": "rewritten", "i": 1}',
         payload_hash = sha256(convert_to('{"i": 1, "text": "rewritten"}', 'UTF8'))
   WHERE session_id = '`+s.ID.String()+`' AND seq = 2;
  SELECT hash INTO prev FROM events WHERE session_id = '`+s.ID.String()+`' AND seq = 1;
  FOR r IN SELECT * FROM events WHERE session_id = '`+s.ID.String()+`' AND seq >= 2 ORDER BY seq LOOP
    prev := sha256(prev || logbook_event_header(r.session_id, r.seq, r.event_id, r.type, r.actor_kind,
                   r.actor_id, r.created_at, r.idempotency_key) || r.payload_hash);
    UPDATE events SET prev_hash = (SELECT hash FROM events WHERE session_id = r.session_id AND seq = r.seq - 1),
                      hash = prev WHERE session_id = r.session_id AND seq = r.seq;
  END LOOP;
END $$`)
	alone, err := v.Verify(ctx, audit.VerifyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !alone.OK() {
		t.Fatalf("the rewrite is not consistent, so this test proves nothing: %+v", alone.Findings)
	}
	read, err := audit.ReadCheckpoint(ctx, bucket, "cp/1.json", pub)
	if err != nil {
		t.Fatal(err)
	}
	r, err := v.VerifyAgainst(ctx, read)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Findings) != 1 || r.Findings[0].Session != s.ID || r.Findings[0].Seq != 4 {
		t.Fatalf("against the checkpoint: %+v; want %s at its checkpointed head 4", r.Findings, s.ID)
	}
	// A forged checkpoint (edited to match the rewrite) fails its signature.
	path := filepath.Join(dir, "cp", "1.json")
	b, _ := os.ReadFile(path)
	forged := strings.Replace(string(b), cp.Heads[0].Hash, strings.Repeat("0", 64), 1)
	os.WriteFile(path, []byte(forged), 0o644)
	if _, err := audit.ReadCheckpoint(ctx, bucket, "cp/1.json", pub); !errors.Is(err, audit.ErrTampered) {
		t.Errorf("forged checkpoint: %v, want ErrTampered", err)
	}
}
