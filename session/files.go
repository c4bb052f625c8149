package session

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// FileHash is the content address of data: its sha256, in lowercase hex.
func FileHash(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// ValidFileHash reports whether s is a content address as FileHash makes them: a sha256 in
// lowercase hex.
func ValidFileHash(s string) bool {
	if len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// FileSize renders n bytes for people, in binary units as LOGBOOK_FILE_MAX reads them:
// "812 B", "3.4 KB", "20.0 MB".
func FileSize(n int64) string {
	switch {
	case n < 1<<10:
		return fmt.Sprintf("%d B", n)
	case n < 1<<20:
		return fmt.Sprintf("%.1f KB", float64(n)/(1<<10))
	case n < 1<<30:
		return fmt.Sprintf("%.1f MB", float64(n)/(1<<20))
	}
	return fmt.Sprintf("%.1f GB", float64(n)/(1<<30))
}

// ErrInBucket is FileContent's answer for content kept in a bucket, not in the database.
var ErrInBucket = errors.New("file content is in the bucket")

const sqlPutFile = `
WITH blob AS (
    INSERT INTO file_blobs (sha256, size, content, in_bucket) VALUES ($2, $3, $4, $5)
    ON CONFLICT (sha256) DO UPDATE SET purged_at = NULL
     WHERE file_blobs.purged_at IS NOT NULL -- shared again before the retention run deleted it
)
INSERT INTO file_refs (session_id, sha256) VALUES ($1, $2) ON CONFLICT DO NOTHING`

// PutFile stores data, whose FileHash is sha, for session id: the content once, whatever
// session shared it first (its bytes, or with inBucket only its size: the caller keeps the
// bytes in its bucket), and the session's reference to it, which a retention purge of the
// session removes (with the content, once nothing else references it). Idempotent.
func (s *Store) PutFile(ctx context.Context, id ID, sha string, data []byte, inBucket bool) error {
	if FileHash(data) != sha {
		return fmt.Errorf("put file %s: %w: the content does not hash to it", sha, ErrInvalidEvent)
	}
	content := data
	if inBucket {
		content = nil
	} else if content == nil {
		content = []byte{} // an empty file is content too (NULL means "in the bucket")
	}
	if _, err := s.pool.Exec(ctx, sqlPutFile, id, sha, int64(len(data)), content, inBucket); err != nil {
		return fmt.Errorf("put file %s of session %s: %w", sha, id, err)
	}
	return nil
}

const sqlFileContent = `SELECT content, in_bucket FROM file_blobs WHERE sha256 = $1 AND purged_at IS NULL`

// FileContent returns the content stored under sha: ErrNotFound when there is none (never
// stored, or purged), ErrInBucket when the bytes are in the bucket.
func (s *Store) FileContent(ctx context.Context, sha string) ([]byte, error) {
	var content []byte
	var inBucket bool
	err := s.pool.QueryRow(ctx, sqlFileContent, sha).Scan(&content, &inBucket)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return nil, fmt.Errorf("file %s: %w", sha, ErrNotFound)
	case err != nil:
		return nil, fmt.Errorf("read file %s: %w", sha, err)
	case inBucket:
		return nil, fmt.Errorf("file %s: %w", sha, ErrInBucket)
	}
	return content, nil
}

const sqlHasFile = `SELECT EXISTS (SELECT 1 FROM file_refs WHERE session_id = $1 AND sha256 = $2)`

// HasFile reports whether session id holds the content sha (a reader allowed to see the
// session may see it).
func (s *Store) HasFile(ctx context.Context, id ID, sha string) (bool, error) {
	var ok bool
	if err := s.pool.QueryRow(ctx, sqlHasFile, id, sha).Scan(&ok); err != nil {
		return false, fmt.Errorf("look up file %s of session %s: %w", sha, id, err)
	}
	return ok, nil
}

// PurgedBucketFiles returns the hashes of bucket-kept content a retention purge left without
// any reference: the caller sweeps them (SweepPurgedFile).
func (s *Store) PurgedBucketFiles(ctx context.Context) ([]string, error) {
	return column[string](ctx, s, "list purged bucket files", `SELECT sha256 FROM file_blobs WHERE in_bucket AND purged_at IS NOT NULL ORDER BY sha256`)
}

const sqlLockPurgedFile = `
SELECT NOT EXISTS (SELECT 1 FROM file_refs r WHERE r.sha256 = b.sha256)
FROM file_blobs b WHERE b.sha256 = $1 AND b.in_bucket AND b.purged_at IS NOT NULL
FOR UPDATE`

// SweepPurgedFile finishes the purge of bucket content sha: with its row locked — a session
// sharing the same content again (PutFile) waits — it checks that nothing references it,
// calls remove (which deletes the bucket's object), and deletes the row. It reports whether
// it removed it; content shared again since the purge is left alone.
func (s *Store) SweepPurgedFile(ctx context.Context, sha string, remove func(ctx context.Context) error) (bool, error) {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return false, fmt.Errorf("sweep purged file %s: %w", sha, err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	var unreferenced bool
	err = tx.QueryRow(ctx, sqlLockPurgedFile, sha).Scan(&unreferenced)
	if errors.Is(err, pgx.ErrNoRows) || (err == nil && !unreferenced) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("sweep purged file %s: %w", sha, err)
	}
	if err := remove(ctx); err != nil {
		return false, err
	}
	if _, err := tx.Exec(ctx, `DELETE FROM file_blobs WHERE sha256 = $1`, sha); err != nil {
		return false, fmt.Errorf("sweep purged file %s: %w", sha, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return false, fmt.Errorf("sweep purged file %s: %w", sha, err)
	}
	return true, nil
}
