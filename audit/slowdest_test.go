package audit_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"gocloud.dev/blob"
	"gocloud.dev/blob/driver"
	"gocloud.dev/gcerrors"

	"github.com/logbook/logbook/audit"
	"github.com/logbook/logbook/session"
)

// slowBucket is an in-memory destination whose writers take closeDelay to Close, like an
// upload that commits the object on Close. Only writing is implemented: the driver methods
// an export does not call are left to the nil embedded interface.
type slowBucket struct {
	driver.Bucket
	closeDelay time.Duration
	mu         sync.Mutex
	objects    map[string][]byte
	// maxDeletes, when above 0, is how many deletes succeed; the rest fail.
	maxDeletes, deleted int
}

func (b *slowBucket) Delete(_ context.Context, key string, _ *driver.DeleteOptions) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.maxDeletes > 0 && b.deleted >= b.maxDeletes {
		return errors.New("delete refused")
	}
	b.deleted++
	delete(b.objects, key)
	return nil
}

func (b *slowBucket) NewTypedWriter(ctx context.Context, key, _ string, _ *driver.WriterOptions) (driver.Writer, error) {
	return &slowWriter{ctx: ctx, b: b, key: key}, nil
}

// ListPaged lists the objects written so far, in one page (an export checks its
// destination is empty first).
func (b *slowBucket) ListPaged(_ context.Context, opts *driver.ListOptions) (*driver.ListPage, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	page := &driver.ListPage{}
	for k, v := range b.objects {
		if strings.HasPrefix(k, opts.Prefix) {
			page.Objects = append(page.Objects, &driver.ListObject{Key: k, Size: int64(len(v))})
		}
	}
	return page, nil
}
func (b *slowBucket) ErrorCode(error) gcerrors.ErrorCode { return gcerrors.Unknown }
func (b *slowBucket) As(any) bool                        { return false }
func (b *slowBucket) ErrorAs(error, any) bool            { return false }
func (b *slowBucket) Close() error                       { return nil }

type slowWriter struct {
	ctx context.Context
	b   *slowBucket
	key string
	buf bytes.Buffer
}

func (w *slowWriter) Write(p []byte) (int, error) { return w.buf.Write(p) }
func (w *slowWriter) Close() error {
	select {
	case <-time.After(w.b.closeDelay):
	case <-w.ctx.Done():
		return w.ctx.Err()
	}
	w.b.mu.Lock()
	defer w.b.mu.Unlock()
	w.b.objects[w.key] = bytes.Clone(w.buf.Bytes())
	return nil
}

// A destination that takes longer to close a file than PostgreSQL lets a transaction sit
// idle (idle_in_transaction_session_timeout) does not fail the export: the files are
// uploaded after the export's transaction has ended.
func TestExportSurvivesASlowClosingDestination(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	s := f.open(t, "C0000001", "1700000000.000100")
	first := f.append(t, s.ID, alice, session.TypeUserMessage, map[string]any{"text": "hello"})
	last := f.append(t, s.ID, bob, session.TypeUserMessage, map[string]any{"text": "bye"})

	// The auditor's pool with a short idle-in-transaction limit; a Close takes longer.
	pool, err := session.Connect(ctx, f.url, session.PoolOptions{Role: "logbook_auditor", IdleInTransaction: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	sb := &slowBucket{closeDelay: 700 * time.Millisecond, objects: map[string][]byte{}}
	dst := blob.NewBucket(sb)
	exp := audit.NewExporter(session.NewStore(pool, session.Options{}), pool, audit.ExporterOptions{SpoolDir: t.TempDir()})
	m, err := exp.Export(ctx, audit.Query{From: first.CreatedAt, To: last.CreatedAt.Add(time.Microsecond)}, dst, "x")
	if err != nil {
		t.Fatalf("export to a slow destination: %v", err)
	}
	if m.Counts.Events != 2 {
		t.Fatalf("exported %d events, want 2", m.Counts.Events)
	}
	sb.mu.Lock()
	defer sb.mu.Unlock()
	for _, name := range []string{"events.jsonl", "access.jsonl", "web_access.jsonl", audit.ManifestName} {
		if _, ok := sb.objects["x/"+name]; !ok {
			t.Errorf("x/%s was not written (have %d objects)", name, len(sb.objects))
		}
	}
	if got := bytes.Count(sb.objects["x/events.jsonl"], []byte("\n")); got != 2 {
		t.Errorf("events.jsonl has %d lines, want 2", got)
	}
}
