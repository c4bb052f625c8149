package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/logbook/logbook/audit"
	"github.com/logbook/logbook/migrations/pgtest"
	"github.com/logbook/logbook/session"
	"github.com/logbook/logbook/session/filestore"
)

// `logbook audit export --with-files` writes the content of the files the events reference
// (kept in the LOGBOOK_BLOB_URL bucket) into the export, verify-export checks it, and
// `logbook audit purge` deletes a purged session's content from the bucket.
func TestAuditExportWithFilesAndPurgeWithABucket(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbURL := pgtest.New(t)
	files := t.TempDir()
	vars := map[string]string{"DATABASE_URL": dbURL, "USER": "auditor", "LOGBOOK_BLOB_URL": "file://" + files}
	getenv := func(k string) string { return vars[k] }

	pool, err := session.Connect(ctx, dbURL, session.PoolOptions{Role: "logbook_app"})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	store := session.NewStore(pool, session.Options{})
	fs, err := filestore.Open(ctx, store, vars["LOGBOOK_BLOB_URL"])
	if err != nil {
		t.Fatal(err)
	}
	defer fs.Close()
	s, err := store.Open(ctx, session.ThreadKey{Team: "T0000001", Channel: "C0000001", ThreadTS: "1700000000.000100"})
	if err != nil {
		t.Fatal(err)
	}
	data := []byte("the build log\n")
	sha, err := fs.Put(ctx, s.ID, data)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Append(ctx, s.ID,
		session.NewEvent{Type: session.TypeUserMessage, Actor: session.Actor{Kind: session.ActorUser, ID: "U0000001"},
			Payload: session.UserMessage{Team: "T0000001", Channel: "C0000001", ThreadTS: s.Key.ThreadTS, TS: s.Key.ThreadTS, User: "U0000001", Text: "log attached"}},
		session.NewEvent{Type: session.TypeFileFetched, Actor: session.Actor{Kind: session.ActorSystem, ID: "files"},
			Payload: session.FileFetched{FileID: "F1", TS: s.Key.ThreadTS, Name: "build.log", Size: int64(len(data)), SHA256: sha, Status: session.FileStored}},
	); err != nil {
		t.Fatal(err)
	}

	out := filepath.Join(t.TempDir(), "export")
	var stdout, stderr bytes.Buffer
	now := time.Now()
	if err := run(ctx, []string{"audit", "export", "--with-files", "--out", out,
		"--from", now.Add(-time.Hour).Format(time.RFC3339), "--to", now.Add(time.Minute).Format(time.RFC3339)},
		getenv, nil, &stdout, &stderr); err != nil {
		t.Fatalf("audit export --with-files: %v\n%s", err, stderr.String())
	}
	if got, err := os.ReadFile(filepath.Join(out, "files", sha)); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("files/%s in the export: %q, %v", sha, got, err)
	}
	if !strings.Contains(stdout.String(), "1 files' content (14 bytes) under files/") {
		t.Errorf("export output:\n%s", stdout.String())
	}
	stdout.Reset()
	if err := run(ctx, []string{"audit", "verify-export", out}, getenv, nil, &stdout, &stderr); err != nil {
		t.Fatalf("verify-export: %v\n%s", err, stderr.String())
	}
	if err := os.WriteFile(filepath.Join(out, "files", sha), []byte("the build log!"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := run(ctx, []string{"audit", "verify-export", out}, getenv, nil, &stdout, &stderr); err == nil {
		t.Error("verify-export accepts changed file content")
	}

	object := filepath.Join(files, "files", sha[:2], sha)
	if _, err := os.Stat(object); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Millisecond)
	stdout.Reset()
	if err := run(ctx, []string{"audit", "purge", "--older-than", "1ms"}, getenv, nil, &stdout, &stderr); err != nil {
		t.Fatalf("audit purge: %v\n%s", err, stderr.String())
	}
	if !strings.Contains(stdout.String(), "1 sessions purged") || !strings.Contains(stdout.String(), "1 purged files' content deleted from the bucket") {
		t.Errorf("purge output:\n%s", stdout.String())
	}
	if _, err := os.Stat(object); !os.IsNotExist(err) {
		t.Errorf("the purged session's content is still in the bucket: %v", err)
	}
	if _, err := fs.FileContent(ctx, sha); err == nil {
		t.Error("the purged content still reads")
	}

	// An export of the purged window lists nothing to include (the payloads are gone) and
	// still verifies.
	out2 := filepath.Join(t.TempDir(), "export")
	if err := run(ctx, []string{"audit", "export", "--with-files", "--out", out2,
		"--from", now.Add(-time.Hour).Format(time.RFC3339), "--to", now.Add(time.Minute).Format(time.RFC3339)},
		getenv, nil, &stdout, &stderr); err != nil {
		t.Fatalf("audit export after the purge: %v\n%s", err, stderr.String())
	}
	b, err := audit.OpenBucket(ctx, out2)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if check, err := audit.VerifyExport(ctx, b, "", nil); err != nil || !check.Manifest.WithFiles || len(check.Manifest.FileContents) != 0 {
		t.Errorf("export after the purge: %+v, %v", check.Manifest.FileContents, err)
	}
}
