package filestore_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"go.uber.org/goleak"

	"github.com/logbook/logbook/session"
	"github.com/logbook/logbook/session/filestore"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// memLog is the log's side of the store, in memory: what PutFile recorded.
type memLog struct {
	mu    sync.Mutex
	blobs map[string][]byte // nil value: in the bucket
}

func (l *memLog) PutFile(ctx context.Context, id session.ID, sha string, data []byte, inBucket bool) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if inBucket {
		data = nil
	}
	l.blobs[sha] = data
	return nil
}

func (l *memLog) FileContent(ctx context.Context, sha string) ([]byte, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	data, ok := l.blobs[sha]
	switch {
	case !ok:
		return nil, session.ErrNotFound
	case data == nil:
		return nil, session.ErrInBucket
	}
	return data, nil
}

// With a bucket the bytes live there, under their hash; the log keeps only the reference;
// Delete removes them, and deleting again is no error.
func TestBucketStore(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	log := &memLog{blobs: map[string][]byte{}}
	st, err := filestore.Open(context.Background(), log, "file://"+dir)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	data := []byte("kubectl logs says OOMKilled")
	sha, err := st.Put(ctx, session.ID{1}, data)
	if err != nil || sha != session.FileHash(data) {
		t.Fatalf("Put: %s %v", sha, err)
	}
	if log.blobs[sha] != nil {
		t.Fatal("the database got the bytes too")
	}
	if onDisk, err := os.ReadFile(filepath.Join(dir, "files", sha[:2], sha)); err != nil || string(onDisk) != string(data) {
		t.Fatalf("bucket object: %q %v", onDisk, err)
	}
	if got, err := st.FileContent(ctx, sha); err != nil || string(got) != string(data) {
		t.Fatalf("FileContent: %q %v", got, err)
	}
	if err := st.Delete(ctx, sha); err != nil {
		t.Fatal(err)
	}
	if _, err := st.FileContent(ctx, sha); !errors.Is(err, session.ErrNotFound) {
		t.Fatalf("after Delete: %v", err)
	}
	if err := st.Delete(ctx, sha); err != nil {
		t.Fatalf("second Delete: %v", err)
	}
	// Without a bucket, content in the bucket cannot be read, and says why.
	if _, err := filestore.NewStore(log).FileContent(ctx, sha); err == nil {
		t.Fatal("read in-bucket content without the bucket")
	}
}
