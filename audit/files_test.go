package audit_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/logbook/logbook/audit"
	"github.com/logbook/logbook/session"
	"github.com/logbook/logbook/session/filestore"
)

var filesActor = session.Actor{Kind: session.ActorSystem, ID: "files"}

// shareFile stores data for sess through fs and appends the file_ref and file_fetched (or,
// with upload, the file_upload) that reference it; it returns the hash.
func shareFile(t *testing.T, f fixture, fs *filestore.Store, sess session.Session, ts, name string, data []byte, upload bool) string {
	t.Helper()
	ctx := context.Background()
	sha, err := fs.Put(ctx, sess.ID, data)
	if err != nil {
		t.Fatal(err)
	}
	if upload {
		f.append(t, sess.ID, filesActor, session.TypeFileUpload, session.FileUpload{CallID: "call-" + name, FileID: "FU" + name,
			Name: name, Size: int64(len(data)), SHA256: sha, Status: "shared", TS: ts})
		return sha
	}
	f.append(t, sess.ID, alice, session.TypeUserMessage, session.UserMessage{Team: "T0000001", Channel: sess.Key.Channel,
		ThreadTS: sess.Key.ThreadTS, TS: ts, User: alice.ID, Text: "see " + name})
	f.append(t, sess.ID, alice, session.TypeFileRef, session.FileRef{FileID: "F" + name, Name: name, Mimetype: "text/plain",
		Size: int64(len(data)), TS: ts, User: alice.ID})
	f.append(t, sess.ID, filesActor, session.TypeFileFetched, session.FileFetched{FileID: "F" + name, TS: ts, Name: name,
		Mimetype: "text/plain", Size: int64(len(data)), SHA256: sha, Status: session.FileStored})
	return sha
}

// An export with files holds the content of every file its events reference, as
// files/<sha256>, listed with size and hash; what is gone is listed as missing and fails
// nothing; verify-export checks the content too. Without Files an export is as before.
func TestExportWithFiles(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	s := f.open(t, "C0000001", "1700000000.000100")
	other := f.open(t, "C0000002", "1700000000.000200")
	appFiles := filestore.NewStore(f.app)
	logSHA := shareFile(t, f, appFiles, s, "1700000000.000100", "build.log", []byte("error: out of memory\n"), false)
	outSHA := shareFile(t, f, appFiles, s, "1700000010.000100", "summary.md", []byte("# summary\n"), true)
	sameSHA := shareFile(t, f, appFiles, other, "1700000000.000200", "copy.log", []byte("error: out of memory\n"), false)
	if sameSHA != logSHA {
		t.Fatal("the same bytes hash differently")
	}
	// Files whose content is not there: too large (no hash), and a hash the store does not
	// have (its content purged).
	f.append(t, s.ID, filesActor, session.TypeFileFetched, session.FileFetched{FileID: "FBIG", TS: "1700000020.000100", Name: "core.zip",
		Size: 1 << 30, Status: session.FileTooLarge, Reason: "over the limit"})
	goneSHA := session.FileHash([]byte("purged long ago"))
	f.append(t, s.ID, filesActor, session.TypeFileFetched, session.FileFetched{FileID: "FGONE", TS: "1700000030.000100", Name: "gone.txt",
		Size: 15, SHA256: goneSHA, Status: session.FileStored})
	// Not a hash: never a file name in the export.
	f.append(t, s.ID, filesActor, session.TypeFileUpload, session.FileUpload{CallID: "evil", Name: "x", SHA256: "../../etc/passwd", Status: "shared"})
	to := f.dbNow(t).Add(time.Millisecond)
	q := audit.Query{From: to.Add(-time.Hour), To: to}

	// Read through the auditor's connection, as the CLI does.
	exp := audit.NewExporter(f.auditor, f.auditorPool, audit.ExporterOptions{Files: filestore.NewStore(f.auditor), Settle: time.Millisecond})
	bucket, dir := newBucket(t)
	m, err := exp.Export(ctx, q, bucket, "")
	if err != nil {
		t.Fatal(err)
	}
	if !m.WithFiles || len(m.FileContents) != 2 || len(m.MissingFiles) != 1 {
		t.Fatalf("manifest: with_files %v, contents %+v, missing %+v", m.WithFiles, m.FileContents, m.MissingFiles)
	}
	wantShas := []string{logSHA, outSHA}
	slices.Sort(wantShas)
	for i, c := range m.FileContents {
		data, err := os.ReadFile(filepath.Join(dir, "files", c.SHA256))
		if err != nil {
			t.Fatal(err)
		}
		if c.SHA256 != wantShas[i] || c.Name != "files/"+c.SHA256 || c.Bytes != int64(len(data)) || session.FileHash(data) != c.SHA256 {
			t.Errorf("content %d = %+v (file of %d bytes)", i, c, len(data))
		}
	}
	if mf := m.MissingFiles[0]; mf.SHA256 != goneSHA || !strings.Contains(mf.Reason, "purged") || mf.Mismatch {
		t.Errorf("missing = %+v", mf)
	}
	entries, err := os.ReadDir(filepath.Join(dir, "files"))
	if err != nil || len(entries) != 2 {
		t.Errorf("files/ holds %d entries (%v), want 2", len(entries), err)
	}
	if _, err := audit.VerifyExport(ctx, bucket, "", nil); err != nil {
		t.Fatalf("verify-export of an intact export with files: %v", err)
	}

	// The same in CSV.
	csvBucket, _ := newBucket(t)
	qc := q
	qc.Format = audit.CSV
	if mc, err := exp.Export(ctx, qc, csvBucket, "csv"); err != nil || len(mc.FileContents) != 2 || len(mc.MissingFiles) != 1 {
		t.Errorf("CSV export: contents %+v, missing %+v, %v", mc.FileContents, mc.MissingFiles, err)
	} else if _, err := audit.VerifyExport(ctx, csvBucket, "csv", nil); err != nil {
		t.Errorf("verify-export of the CSV export: %v", err)
	}

	// Any changed, missing or extra byte of the content fails verify-export.
	content := filepath.Join(dir, "files", logSHA)
	orig, err := os.ReadFile(content)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		change func()
		undo   func()
	}{
		{"changed byte", func() { os.WriteFile(content, append([]byte("E"), orig[1:]...), 0o644) }, func() { os.WriteFile(content, orig, 0o644) }},
		{"missing content", func() { os.Remove(content) }, func() { os.WriteFile(content, orig, 0o644) }},
		{"extra content", func() { os.WriteFile(filepath.Join(dir, "files", goneSHA), []byte("purged long ago"), 0o644) },
			func() { os.Remove(filepath.Join(dir, "files", goneSHA)) }},
		{"extra file deeper", func() {
			os.MkdirAll(filepath.Join(dir, "files", "x"), 0o755)
			os.WriteFile(filepath.Join(dir, "files", "x", "y"), nil, 0o644)
		},
			func() { os.RemoveAll(filepath.Join(dir, "files", "x")) }},
	} {
		tc.change()
		if _, err := audit.VerifyExport(ctx, bucket, "", nil); !errors.Is(err, audit.ErrTampered) {
			t.Errorf("%s: verify-export = %v, want ErrTampered", tc.name, err)
		}
		tc.undo()
	}
	if _, err := audit.VerifyExport(ctx, bucket, "", nil); err != nil {
		t.Fatalf("verify-export after undoing the changes: %v", err)
	}

	// Content whose stored bytes do not hash to their name is not exported, and says so.
	if _, err := f.su.Exec(ctx, `UPDATE file_blobs SET content = convert_to('# SUMMARY'||chr(10), 'UTF8') WHERE sha256 = $1`, outSHA); err != nil {
		t.Fatal(err)
	}
	bucket2, dir2 := newBucket(t)
	m2, err := exp.Export(ctx, q, bucket2, "")
	if err != nil {
		t.Fatal(err)
	}
	var mismatch []string
	for _, mf := range m2.MissingFiles {
		if mf.Mismatch {
			mismatch = append(mismatch, mf.SHA256)
		}
	}
	if len(mismatch) != 1 || mismatch[0] != outSHA {
		t.Errorf("missing files = %+v, want %s as a mismatch", m2.MissingFiles, outSHA)
	}
	if _, err := os.Stat(filepath.Join(dir2, "files", outSHA)); !os.IsNotExist(err) {
		t.Errorf("mismatched content was exported: %v", err)
	}

	// Without Files: no content, and a manifest with no word about it.
	plain := audit.NewExporter(f.auditor, f.auditorPool, audit.ExporterOptions{Settle: time.Millisecond})
	bucket3, dir3 := newBucket(t)
	m3, err := plain.Export(ctx, q, bucket3, "")
	if err != nil {
		t.Fatal(err)
	}
	if m3.WithFiles || len(m3.FileContents) != 0 {
		t.Errorf("an export without Files includes content: %+v", m3.FileContents)
	}
	if _, err := os.Stat(filepath.Join(dir3, "files")); !os.IsNotExist(err) {
		t.Errorf("an export without Files has files/: %v", err)
	}
	raw, err := os.ReadFile(filepath.Join(dir3, audit.ManifestName))
	if err != nil {
		t.Fatal(err)
	}
	var keys map[string]json.RawMessage
	if err := json.Unmarshal(raw, &keys); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"with_files", "file_contents", "missing_files"} {
		if _, ok := keys[k]; ok {
			t.Errorf("a manifest without files has %q", k)
		}
	}
	// A files/ folder an export without files does not list is found.
	if err := os.MkdirAll(filepath.Join(dir3, "files"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir3, "files", logSHA), orig, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := audit.VerifyExport(ctx, bucket3, "", nil); !errors.Is(err, audit.ErrTampered) {
		t.Errorf("verify-export with unlisted content = %v, want ErrTampered", err)
	}
}

// With a bucket, retention deletes the objects of content only purged sessions held (and then
// their rows); a held session's content and content an unpurged session shares stay.
func TestRetentionDeletesPurgedContentFromTheBucket(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	dir := t.TempDir()
	blobURL := "file://" + dir
	appFiles, err := filestore.Open(ctx, f.app, blobURL)
	if err != nil {
		t.Fatal(err)
	}
	defer appFiles.Close()
	object := func(sha string) string { return filepath.Join(dir, "files", sha[:2], sha) }

	purged := f.open(t, "C0000001", "1700000000.000100")
	held := f.open(t, "C00000HC", "1700000000.000200")
	onlyPurged := shareFile(t, f, appFiles, purged, "1700000000.000100", "secret.txt", []byte("only the purged session had this"), false)
	shared := shareFile(t, f, appFiles, purged, "1700000001.000100", "shared.txt", []byte("both sessions had this"), false)
	heldSHA := shareFile(t, f, appFiles, held, "1700000000.000200", "held.txt", []byte("under legal hold"), true)
	if _, err := audit.AddHold(ctx, f.auditorPool, audit.Who{Name: "legal@example.com"}, audit.HoldSession, held.ID.String(), "litigation"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Millisecond)
	now := f.dbNow(t)
	// A session active after the cutoff shares one of the purged session's files.
	recent := f.open(t, "C0000003", "1700000000.000300")
	if got := shareFile(t, f, appFiles, recent, "1700000000.000300", "again.txt", []byte("both sessions had this"), false); got != shared {
		t.Fatal("the same bytes hash differently")
	}
	for _, sha := range []string{onlyPurged, shared, heldSHA} {
		if _, err := os.Stat(object(sha)); err != nil {
			t.Fatalf("before the purge: %v", err)
		}
	}

	retFiles, err := filestore.Open(ctx, session.NewStore(f.retention, session.Options{}), blobURL)
	if err != nil {
		t.Fatal(err)
	}
	defer retFiles.Close()
	ret, err := audit.NewRetention(f.retention, time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	ps, err := ret.WithFiles(retFiles).Purge(ctx, audit.Who{Name: "retention", System: true}, now)
	if err != nil || len(ps) != 1 || ps[0].Session != purged.ID {
		t.Fatalf("purge: %+v, %v; want the one unheld, inactive session", ps, err)
	}
	if _, err := os.Stat(object(onlyPurged)); !os.IsNotExist(err) {
		t.Errorf("the purged session's content is still in the bucket: %v", err)
	}
	for _, sha := range []string{shared, heldSHA} {
		if _, err := os.Stat(object(sha)); err != nil {
			t.Errorf("content a live session holds left the bucket: %v", err)
		}
	}
	blobs := func() map[string]bool {
		t.Helper()
		rows, err := f.su.Query(ctx, `SELECT sha256 FROM file_blobs`)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		out := map[string]bool{}
		for rows.Next() {
			var s string
			if err := rows.Scan(&s); err != nil {
				t.Fatal(err)
			}
			out[s] = true
		}
		return out
	}
	if b := blobs(); b[onlyPurged] || !b[shared] || !b[heldSHA] {
		t.Errorf("file_blobs after the purge = %v, want the shared and held content only", b)
	}
	if pending, err := ret.PendingFiles(ctx); err != nil || len(pending) != 0 {
		t.Errorf("pending after the purge: %v, %v", pending, err)
	}
	// The survivors still read, through the store the pages use.
	for _, sha := range []string{shared, heldSHA} {
		if _, err := appFiles.FileContent(ctx, sha); err != nil {
			t.Errorf("read %s after the purge: %v", sha, err)
		}
	}
	if _, err := appFiles.FileContent(ctx, onlyPurged); !errors.Is(err, session.ErrNotFound) {
		t.Errorf("read the purged content: %v, want ErrNotFound", err)
	}
}

// A retention run without the bucket leaves marked content marked (its objects there) for a
// run that has it, which deletes them.
func TestRetentionWithoutTheBucketLeavesContentForALaterRun(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	dir := t.TempDir()
	appFiles, err := filestore.Open(ctx, f.app, "file://"+dir)
	if err != nil {
		t.Fatal(err)
	}
	defer appFiles.Close()
	s := f.open(t, "C0000001", "1700000000.000100")
	sha := shareFile(t, f, appFiles, s, "1700000000.000100", "a.txt", []byte("purge me"), false)
	time.Sleep(2 * time.Millisecond)
	ret, err := audit.NewRetention(f.retention, time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if ps, err := ret.Purge(ctx, audit.Who{Name: "retention", System: true}, f.dbNow(t)); err != nil || len(ps) != 1 {
		t.Fatalf("purge: %+v, %v", ps, err)
	}
	if pending, err := ret.PendingFiles(ctx); err != nil || len(pending) != 1 || pending[0] != sha {
		t.Fatalf("pending = %v, %v; want %s", pending, err, sha)
	}
	object := filepath.Join(dir, "files", sha[:2], sha)
	if _, err := os.Stat(object); err != nil {
		t.Fatalf("the object went without a bucket: %v", err)
	}
	retFiles, err := filestore.Open(ctx, session.NewStore(f.retention, session.Options{}), "file://"+dir)
	if err != nil {
		t.Fatal(err)
	}
	defer retFiles.Close()
	deleted, err := ret.WithFiles(retFiles).DeletePurgedFiles(ctx)
	if err != nil || len(deleted) != 1 || deleted[0] != sha {
		t.Fatalf("deleted = %v, %v", deleted, err)
	}
	if _, err := os.Stat(object); !os.IsNotExist(err) {
		t.Errorf("the object is still there: %v", err)
	}
	if pending, err := ret.PendingFiles(ctx); err != nil || len(pending) != 0 {
		t.Errorf("pending after the sweep: %v, %v", pending, err)
	}
}

// The images an MCP tool returned (a tool_result's images, kept in the file store) are
// exported with the files.
func TestExportWithToolImages(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	s := f.open(t, "C0000001", "1700000000.000100")
	png := []byte("\x89PNG\r\n\x1a\n not really")
	sha, err := filestore.NewStore(f.app).Put(ctx, s.ID, png)
	if err != nil {
		t.Fatal(err)
	}
	f.append(t, s.ID, filesActor, session.TypeToolResult, session.ToolResult{CallID: "toolu_1", Content: "a picture", Server: "shots", Tool: "grab",
		Images: []session.ToolImage{{SHA256: sha, MediaType: "image/png", Size: int64(len(png))}}})
	to := f.dbNow(t).Add(time.Millisecond)
	exp := audit.NewExporter(f.auditor, f.auditorPool, audit.ExporterOptions{Files: filestore.NewStore(f.auditor), Settle: time.Millisecond})
	bucket, dir := newBucket(t)
	m, err := exp.Export(ctx, audit.Query{From: to.Add(-time.Hour), To: to}, bucket, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(m.FileContents) != 1 || m.FileContents[0].SHA256 != sha {
		t.Fatalf("contents %+v, want the tool's image", m.FileContents)
	}
	if data, err := os.ReadFile(filepath.Join(dir, "files", sha)); err != nil || string(data) != string(png) {
		t.Errorf("files/%s: %q, %v", sha, data, err)
	}
}
