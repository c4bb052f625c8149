package audit_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"gocloud.dev/blob"

	"github.com/logbook/logbook/audit"
	"github.com/logbook/logbook/session"
)

// An export into a destination that holds objects is refused, and leaves it as it was; with
// Overwrite it replaces an earlier export whole (issue 29: a second export silently replaced
// the first, mixing their files, and verify-export then failed).
func TestExportRefusesANonEmptyDestinationUnlessOverwrite(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	s := f.open(t, "C0000001", "1700000000.000100")
	first := f.append(t, s.ID, alice, session.TypeUserMessage, map[string]any{"text": "one"})
	last := f.append(t, s.ID, bob, session.TypeUserMessage, map[string]any{"text": "two"})
	q := audit.Query{From: first.CreatedAt, To: last.CreatedAt.Add(time.Microsecond), Format: audit.CSV}
	bucket, dir := newBucket(t)
	exp := audit.NewExporter(f.auditor, f.auditorPool, audit.ExporterOptions{})
	if _, err := exp.Export(ctx, q, bucket, ""); err != nil {
		t.Fatal(err)
	}
	before := readManifest(t, dir)

	q.Format = audit.JSONL
	if _, err := exp.Export(ctx, q, bucket, ""); !errors.Is(err, audit.ErrNotEmpty) || !strings.Contains(err.Error(), "holds an export already (manifest.json") {
		t.Fatalf("second export into the same directory: %v; want ErrNotEmpty naming what is there", err)
	}
	if _, err := audit.VerifyExport(ctx, bucket, "", nil); err != nil {
		t.Fatalf("the first export after a refused second one: %v", err)
	}
	if after := readManifest(t, dir); after.GeneratedAt != before.GeneratedAt {
		t.Fatal("the refused export changed the manifest")
	}

	over := audit.NewExporter(f.auditor, f.auditorPool, audit.ExporterOptions{Overwrite: true})
	m, err := over.Export(ctx, q, bucket, "")
	if err != nil {
		t.Fatalf("export with Overwrite: %v", err)
	}
	if m.Query.Format != audit.JSONL {
		t.Fatalf("overwriting export: format %s", m.Query.Format)
	}
	if _, err := os.Stat(filepath.Join(dir, "events.csv")); !os.IsNotExist(err) {
		t.Errorf("the earlier export's events.csv is still there beside the new export (%v)", err)
	}
	if _, err := audit.VerifyExport(ctx, bucket, "", nil); err != nil {
		t.Fatalf("the overwriting export does not verify: %v", err)
	}

	// A file that is no export's is never deleted, even with Overwrite: nothing changes.
	notes := filepath.Join(dir, "notes.txt")
	if err := os.WriteFile(notes, []byte("mine"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := over.Export(ctx, q, bucket, ""); !errors.Is(err, audit.ErrNotEmpty) || !strings.Contains(err.Error(), "notes.txt") {
		t.Fatalf("overwrite over a foreign file: %v; want ErrNotEmpty naming notes.txt", err)
	}
	if _, err := os.Stat(notes); err != nil {
		t.Fatalf("the foreign file: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, audit.ManifestName)); err != nil {
		t.Fatalf("a refused overwrite deleted the export: %v", err)
	}
}

// ClearExport deletes the manifest first, so an export cleared halfway (the process died, a
// delete failed) is never a valid-looking export over mixed files, and the next ClearExport
// finishes the job.
func TestClearExportHalfwayLeavesNoManifest(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	s := f.open(t, "C0000001", "1700000000.000100")
	ev := f.append(t, s.ID, alice, session.TypeUserMessage, map[string]any{"text": "one"})
	mem := &slowBucket{objects: map[string][]byte{}}
	bucket := blob.NewBucket(mem)
	defer bucket.Close()
	exp := audit.NewExporter(f.auditor, f.auditorPool, audit.ExporterOptions{})
	q := audit.Query{From: ev.CreatedAt, To: ev.CreatedAt.Add(time.Microsecond)}
	if _, err := exp.Export(ctx, q, bucket, "x"); err != nil {
		t.Fatal(err)
	}
	if _, ok := mem.objects["x/"+audit.ManifestName]; !ok || len(mem.objects) != 10 { // events, access, web_access, spend, budget_raises, schedules, schedule_ticks, hook_deliveries, automations
		t.Fatalf("exported objects: %v", keys(mem))
	}
	mem.maxDeletes = 1
	if err := audit.ClearExport(ctx, bucket, "x"); err == nil {
		t.Fatal("ClearExport with failing deletes: no error")
	}
	if _, ok := mem.objects["x/"+audit.ManifestName]; ok || len(mem.objects) != 9 {
		t.Fatalf("after one delete, left: %v; want everything but the manifest", keys(mem))
	}
	mem.maxDeletes = 0
	if err := audit.ClearExport(ctx, bucket, "x"); err != nil || len(mem.objects) != 0 {
		t.Fatalf("clear what is left: %v, left %v", err, keys(mem))
	}
}

func keys(b *slowBucket) []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var ks []string
	for k := range b.objects {
		ks = append(ks, k)
	}
	return ks
}

// A scheduled run whose prefix holds objects it did not leave is a collision: the run fails
// naming it and nothing is overwritten. What an earlier, failed run of the same window left
// there is cleared by the retry, which then succeeds.
func TestScheduledExportCollisionIsAnError(t *testing.T) {
	t.Parallel()
	e := newSchedEnv(t)
	ctx := context.Background()
	seedDays(t, e.f, time.Date(2025, 3, 1, 0, 0, 0, 0, time.UTC), 1)
	now := time.Date(2025, 3, 2, 1, 0, 0, 0, time.UTC)
	// The window [03-01, 03-02) of schedule "default" is at default/<start>_<end>.
	prefix := filepath.Join(e.dir, "default", "20250301T000000Z_20250302T000000Z")
	if err := os.MkdirAll(prefix, 0o700); err != nil {
		t.Fatal(err)
	}
	foreign := filepath.Join(prefix, "events.jsonl")
	if err := os.WriteFile(foreign, []byte("someone else's\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := e.scheduler(t, e.f.auditorPool, "0 0 * * *", nil, nil)
	runs, err := s.Tick(ctx, now)
	if err == nil || len(runs) != 1 || runs[0].Status != audit.RunFailed || !strings.Contains(runs[0].Err, audit.ErrNotEmpty.Error()) {
		t.Fatalf("tick over a foreign object: %+v, %v; want a failed run saying the destination is not empty", runs, err)
	}
	if b, err := os.ReadFile(foreign); err != nil || string(b) != "someone else's\n" {
		t.Fatalf("the colliding object was changed: %q, %v", b, err)
	}

	// The refused run started nothing: a retry refuses the same, never taking the objects
	// there for its own leftovers.
	runs, err = s.Tick(ctx, now)
	if err == nil || len(runs) != 1 || runs[0].Status != audit.RunFailed {
		t.Fatalf("retry over the foreign object: %+v, %v; want failed again", runs, err)
	}
	if b, err := os.ReadFile(foreign); err != nil || string(b) != "someone else's\n" {
		t.Fatalf("the retry changed the colliding object: %q, %v", b, err)
	}

	// A run that started and failed halfway (here: it panicked after writing events.jsonl)
	// leaves its own files: the retry clears them, and its export verifies.
	if err := os.Remove(foreign); err != nil {
		t.Fatal(err)
	}
	half := &halfExporter{next: audit.NewExporter(e.f.auditor, e.f.auditorPool, audit.ExporterOptions{Settle: time.Millisecond})}
	s = e.scheduler(t, e.f.auditorPool, "0 0 * * *", half, nil)
	if runs, err := s.Tick(ctx, now); err == nil || runs[0].Status != audit.RunFailed {
		t.Fatalf("half-written run: %+v, %v", runs, err)
	}
	if _, err := os.Stat(filepath.Join(prefix, "events.jsonl")); err != nil {
		t.Fatalf("the failed run left nothing: %v", err)
	}
	runs, err = s.Tick(ctx, now)
	if err != nil || len(runs) != 1 || runs[0].Status != audit.RunSucceeded {
		t.Fatalf("retry after a half-written run: %+v, %v", runs, err)
	}
	rel := strings.TrimPrefix(prefix, e.dir+"/")
	if _, err := audit.VerifyExport(ctx, e.bucket, rel, nil); err != nil {
		t.Fatalf("the retried window's export: %v", err)
	}
}

// halfExporter writes an events file and fails, on its first call: a run that died halfway.
type halfExporter struct {
	next  *audit.Exporter
	calls int
}

func (h *halfExporter) Export(ctx context.Context, q audit.Query, dst *blob.Bucket, prefix string) (audit.Manifest, error) {
	if h.calls++; h.calls == 1 {
		if err := dst.WriteAll(ctx, prefix+"/events.jsonl", []byte("{}\n"), nil); err != nil {
			return audit.Manifest{}, err
		}
		return audit.Manifest{}, errors.New("died halfway")
	}
	return h.next.Export(ctx, q, dst, prefix)
}
