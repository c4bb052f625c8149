package audit_test

import (
	"context"
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"github.com/logbook/logbook/audit"
	"github.com/logbook/logbook/session"
	"github.com/logbook/logbook/session/filestore"
)

// forkOf opens a fork of parent at seq in its own thread, as bot.Starter does: its first
// event is the session_forked reference.
func (f fixture) forkOf(t *testing.T, parent session.ID, seq int64, ts string) session.Session {
	t.Helper()
	ref, err := f.app.ForkReference(context.Background(), parent, seq)
	if err != nil {
		t.Fatal(err)
	}
	ref.By = alice.ID
	fk := f.open(t, ref.ParentChannel, ts)
	if _, err := f.app.Append(context.Background(), fk.ID, session.NewEvent{Type: session.TypeSessionForked, Actor: alice,
		Payload: ref, IdempotencyKey: ref.Key()}); err != nil {
		t.Fatal(err)
	}
	return fk
}

// A fork's reference verifies against its parent's chain; a tampered parent event at or
// before the fork's seq fails `audit verify` for the parent and for the fork (also when only
// the fork is verified); a tampered event after it fails the parent alone.
func TestVerifyChecksAForksReferenceAgainstItsParent(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	parent := f.open(t, "C0000001", "1700000000.000100")
	for i := range 5 {
		f.append(t, parent.ID, alice, session.TypeUserMessage, map[string]any{"i": i})
	}
	early := f.forkOf(t, parent.ID, 2, "1700000001.000100")
	late := f.forkOf(t, parent.ID, 4, "1700000002.000100")
	f.append(t, early.ID, bob, session.TypeUserMessage, map[string]any{"text": "try the other fix"})
	v := audit.NewVerifier(f.auditor)
	r, err := v.Verify(ctx, audit.VerifyOptions{})
	if err != nil || !r.OK() || r.Sessions != 3 {
		t.Fatalf("untouched forks: %+v, %v", r, err)
	}

	tamper(t, f, `UPDATE events SET payload = '{"i": 99}' WHERE session_id = $1 AND seq = 3`, parent.ID)
	r, err = v.Verify(ctx, audit.VerifyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	broken := map[session.ID]audit.Finding{}
	for _, fd := range r.Findings {
		broken[fd.Session] = fd
	}
	if fd, ok := broken[parent.ID]; !ok || fd.Seq != 3 {
		t.Errorf("parent: %+v; want broken at 3", r.Findings)
	}
	if fd, ok := broken[late.ID]; !ok || fd.Seq != 1 || !strings.Contains(fd.String(), parent.ID.String()) ||
		!strings.Contains(fd.Reason, "seq 3") {
		t.Errorf("the fork at 4 depends on the tampered event 3: %+v", r.Findings)
	}
	if _, ok := broken[early.ID]; ok {
		t.Errorf("the fork at 2 does not depend on event 3, yet: %+v", broken[early.ID])
	}
	if len(r.Findings) != 2 || r.BadForks != 1 {
		t.Errorf("findings %+v (bad forks %d); want the parent and the late fork", r.Findings, r.BadForks)
	}
	one, err := v.Verify(ctx, audit.VerifyOptions{Session: late.ID})
	if err != nil || one.OK() || one.Findings[0].Session != late.ID {
		t.Errorf("verifying the late fork alone: %+v, %v; want its reference's finding", one, err)
	}

	// A parent whose chain is rewritten consistently from the fork's seq on (every hash
	// recomputed) still fails the fork: the hash it recorded is not the parent's now.
	other := f.open(t, "C0000001", "1700000000.000200")
	f.append(t, other.ID, alice, session.TypeUserMessage, map[string]any{"i": 1})
	fk := f.forkOf(t, other.ID, 1, "1700000003.000100")
	tamper(t, f, `UPDATE events SET hash = sha256(hash) WHERE session_id = $1 AND seq = 1`, other.ID)
	one, err = v.Verify(ctx, audit.VerifyOptions{Session: fk.ID})
	if err != nil || one.OK() || !strings.Contains(one.Findings[0].Reason, "fork of session") {
		t.Errorf("fork of a rewritten parent: %+v, %v", one, err)
	}
}

// A legal hold on a fork holds the parent it depends on through retention; the fork's
// reference stays (its payload is never purged) and, once the hold is gone and the parent is
// purged, still verifies against the parent's hashes.
func TestHoldOnAForkKeepsItsParentThroughRetention(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	parent := f.open(t, "C0000001", "1700000000.000100")
	f.append(t, parent.ID, alice, session.TypeUserMessage, map[string]any{"text": "the deploy timed out"})
	f.append(t, parent.ID, botA, session.TypeAssistantMessage, map[string]any{"text": "rolling back"})
	f.append(t, parent.ID, alice, session.TypeUserMessage, map[string]any{"text": "after the fork"})
	fk := f.forkOf(t, parent.ID, 2, "1700000001.000100")
	f.append(t, fk.ID, bob, session.TypeUserMessage, map[string]any{"text": "try the other fix"})
	unrelated := f.open(t, "C0000001", "1700000000.000300")
	f.append(t, unrelated.ID, alice, session.TypeUserMessage, map[string]any{"text": "goes"})

	person := audit.Who{Name: "legal@example.com"}
	h, err := audit.AddHold(ctx, f.auditorPool, person, audit.HoldSession, fk.ID.String(), "litigation")
	if err != nil {
		t.Fatal(err)
	}
	ret, err := audit.NewRetention(f.retention, time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	who := audit.Who{Name: "retention", System: true}
	ps, err := ret.Purge(ctx, who, f.dbNow(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(ps) != 1 || ps[0].Session != unrelated.ID {
		t.Fatalf("purged %+v; want only the unrelated session (the fork is held, and so is its parent)", ps)
	}
	evs, err := f.app.Events(ctx, parent.ID, session.Range{})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range evs {
		if e.Payload == nil {
			t.Errorf("the held fork's parent lost event %d", e.Seq)
		}
	}

	if err := audit.RemoveHold(ctx, f.auditorPool, person, h.ID, "case closed"); err != nil {
		t.Fatal(err)
	}
	ps, err = ret.Purge(ctx, who, f.dbNow(t))
	if err != nil || len(ps) != 2 {
		t.Fatalf("after the hold: purged %+v, %v; want the parent and the fork", ps, err)
	}
	ref, ok, err := f.app.Forked(ctx, fk.ID)
	if err != nil || !ok || ref.Parent != parent.ID || ref.Seq != 2 {
		t.Fatalf("the fork's reference after the purge: %+v %v %v; want it kept", ref, ok, err)
	}
	r, err := audit.NewVerifier(f.auditor).Verify(ctx, audit.VerifyOptions{Session: fk.ID})
	if err != nil || !r.OK() || r.Purged == 0 {
		t.Errorf("the purged fork of a purged parent: %+v, %v; want its chain and reference to verify", r, err)
	}
}

// Purging a parent empties the history summaries of its forks at every depth (they took the
// parent's words in), recorded as a purge of each fork naming the parent; what a fork said
// itself stays, and every chain still verifies.
func TestPurgingAParentPurgesItsForksSummaries(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	parent := f.open(t, "C0000001", "1700000000.000100")
	f.append(t, parent.ID, alice, session.TypeUserMessage, map[string]any{"text": "the zanzibar deploy timed out"})
	f.append(t, parent.ID, botA, session.TypeAssistantMessage, map[string]any{"text": "rolling back zanzibar"})
	time.Sleep(3 * time.Millisecond) // the parent's events fall before the cutoff below (not a timing assertion)
	mid := f.dbNow(t)
	time.Sleep(3 * time.Millisecond) // and the forks' after it
	fk := f.forkOf(t, parent.ID, 2, "1700000001.000100")
	own := f.append(t, fk.ID, bob, session.TypeUserMessage, map[string]any{"text": "try the other fix"})
	sum := f.append(t, fk.ID, botA, session.TypeContextSummary,
		session.ContextSummary{FromSeq: 1, ToSeq: 2, Summary: "ada said the zanzibar deploy timed out"})
	deep := f.forkOf(t, fk.ID, 3, "1700000002.000100")
	deepSum := f.append(t, deep.ID, botA, session.TypeContextSummary,
		session.ContextSummary{FromSeq: 1, ToSeq: 1, Summary: "zanzibar, then the other fix"})
	unrelated := f.open(t, "C0000001", "1700000003.000100")
	keep := f.append(t, unrelated.ID, botA, session.TypeContextSummary,
		session.ContextSummary{FromSeq: 1, ToSeq: 1, Summary: "not a fork: kept"})

	ret, err := audit.NewRetention(f.retention, time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	ps, err := ret.Purge(ctx, audit.Who{Name: "retention", System: true}, mid)
	if err != nil {
		t.Fatal(err)
	}
	bySession := map[session.ID]audit.Purge{}
	for _, p := range ps {
		bySession[p.Session] = p
	}
	if len(ps) != 3 || bySession[parent.ID].Purged != 2 {
		t.Fatalf("purged %+v; want the parent, and the summaries of its fork and its fork's fork", ps)
	}
	for _, c := range []struct {
		fork session.ID
		seq  int64
	}{{fk.ID, sum.Seq}, {deep.ID, deepSum.Seq}} {
		p, ok := bySession[c.fork]
		if !ok || p.Purged != 1 || p.FromSeq != c.seq || p.ToSeq != c.seq {
			t.Errorf("fork %s: purge record %+v; want its one summary at seq %d", c.fork, p, c.seq)
		}
	}

	payloadOf := func(id session.ID, seq int64) []byte {
		evs, err := f.app.Events(ctx, id, session.Range{From: seq, To: seq})
		if err != nil || len(evs) != 1 {
			t.Fatalf("event %s/%d: %v, %v", id, seq, evs, err)
		}
		return evs[0].Payload
	}
	if payloadOf(fk.ID, sum.Seq) != nil || payloadOf(deep.ID, deepSum.Seq) != nil {
		t.Error("a fork's summary of its purged parent's words is still readable")
	}
	if payloadOf(fk.ID, own.Seq) == nil || payloadOf(fk.ID, 1) == nil {
		t.Error("the fork lost its own message or its reference")
	}
	if payloadOf(unrelated.ID, keep.Seq) == nil {
		t.Error("a summary in a session that is no fork was purged")
	}
	r, err := audit.NewVerifier(f.auditor).Verify(ctx, audit.VerifyOptions{})
	if err != nil || !r.OK() {
		t.Errorf("after the purge: %+v, %v; want every chain and reference to verify", r, err)
	}
}

// An eval record (a what-if's session) copies the recorded side of its original's turn:
// purging the original purges the record but for its link, recorded as a purge naming the
// original, and the link still verifies. A legal hold on an eval record holds its original.
func TestPurgingASessionPurgesItsEvalRecords(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	orig := f.open(t, "C0000001", "1700000000.000100")
	f.append(t, orig.ID, alice, session.TypeUserMessage, map[string]any{"text": "the zanzibar deploy timed out"})
	f.append(t, orig.ID, botA, session.TypeAssistantMessage, map[string]any{"text": "rolling back zanzibar"})
	held := f.open(t, "C0000001", "1700000000.000200")
	f.append(t, held.ID, alice, session.TypeUserMessage, map[string]any{"text": "kept by its eval's hold"})
	evalOf := func(o session.Session) session.Session {
		rec, err := f.app.OpenReplay(ctx, o)
		if err != nil {
			t.Fatal(err)
		}
		ref, err := f.app.ReplayReference(ctx, o, 1)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.app.Append(ctx, rec.ID, session.NewEvent{Type: session.TypeReplayStarted, Actor: alice, Payload: ref, IdempotencyKey: ref.Key()}); err != nil {
			t.Fatal(err)
		}
		f.append(t, rec.ID, botA, session.TypeAssistantMessage, map[string]any{"text": "recorded: rolling back zanzibar"})
		return rec
	}
	time.Sleep(3 * time.Millisecond) // the originals' events fall before the cutoff below (not a timing assertion)
	mid := f.dbNow(t)
	time.Sleep(3 * time.Millisecond) // and the eval records' after it
	rec := evalOf(orig)
	heldRec := evalOf(held)
	// The work the what-if's sandbox saved, stored under the eval record.
	work := []byte("diff --git a/zanzibar.go b/zanzibar.go\n")
	workSHA, err := filestore.NewStore(f.app).Put(ctx, rec.ID, work)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := audit.AddHold(ctx, f.auditorPool, audit.Who{Name: "legal@example.com"}, audit.HoldSession, heldRec.ID.String(), "litigation"); err != nil {
		t.Fatal(err)
	}

	ret, err := audit.NewRetention(f.retention, time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	ps, err := ret.Purge(ctx, audit.Who{Name: "retention", System: true}, mid)
	if err != nil {
		t.Fatal(err)
	}
	if len(ps) != 2 || ps[0].Session != orig.ID || ps[1].Session != rec.ID || ps[1].Purged != 1 || ps[1].FromSeq != 2 {
		t.Fatalf("purged %+v; want the original, then its eval record's one event after its link", ps)
	}
	evs, err := f.app.Events(ctx, rec.ID, session.Range{})
	if err != nil || len(evs) != 2 || evs[0].Payload == nil || evs[1].Payload != nil {
		t.Fatalf("the eval record after the purge: %+v, %v; want its link kept and its copy gone", evs, err)
	}
	if data, err := f.app.FileContent(ctx, workSHA); err == nil || data != nil {
		t.Errorf("the eval record's saved work is still readable after the purge (%d bytes, %v)", len(data), err)
	}
	for _, id := range []session.ID{held.ID, heldRec.ID} {
		evs, err := f.app.Events(ctx, id, session.Range{})
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range evs {
			if e.Payload == nil {
				t.Errorf("session %s under an eval record's hold lost event %d", id, e.Seq)
			}
		}
	}
	r, err := audit.NewVerifier(f.auditor).Verify(ctx, audit.VerifyOptions{})
	if err != nil || !r.OK() {
		t.Errorf("after the purge: %+v, %v; want every chain and link to verify", r, err)
	}
}

// An export shows a fork's link both ways: the parent's manifest entry lists its forks, the
// fork's names its parent at the seq with the hash, verified against the parent's chain.
func TestExportShowsForksBothWays(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	parent := f.open(t, "C0000001", "1700000000.000100")
	first := f.append(t, parent.ID, alice, session.TypeUserMessage, map[string]any{"text": "the deploy timed out"})
	f.append(t, parent.ID, botA, session.TypeAssistantMessage, map[string]any{"text": "rolling back"})
	fk := f.forkOf(t, parent.ID, 2, "1700000001.000100")
	bucket, err := audit.OpenBucket(ctx, "file://"+t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer bucket.Close()
	m, err := audit.NewExporter(f.auditor, f.auditorPool, audit.ExporterOptions{Settle: time.Millisecond}).Export(ctx,
		audit.Query{From: first.CreatedAt, To: f.dbNow(t)}, bucket, "")
	if err != nil {
		t.Fatal(err)
	}
	byID := map[string]audit.SessionChain{}
	for _, sc := range m.Sessions {
		byID[sc.SessionID] = sc
	}
	p, c := byID[parent.ID.String()], byID[fk.ID.String()]
	if len(p.Forks) != 1 || p.Forks[0].SessionID != fk.ID.String() || p.Forks[0].Seq != 2 || p.ForkOf != nil {
		t.Errorf("the parent's manifest entry: %+v", p)
	}
	hash, err := f.app.HashAt(ctx, parent.ID, 2)
	if err != nil {
		t.Fatal(err)
	}
	if c.ForkOf == nil || c.ForkOf.SessionID != parent.ID.String() || c.ForkOf.Seq != 2 || !c.ForkOf.Verified ||
		c.ForkOf.Hash != hex.EncodeToString(hash) || len(c.Forks) != 0 {
		t.Errorf("the fork's manifest entry: %+v (fork of %+v)", c, c.ForkOf)
	}
}
