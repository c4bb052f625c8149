package filestore

import (
	"context"
	"errors"
	"fmt"
	"net/url"

	"gocloud.dev/blob"
	_ "gocloud.dev/blob/fileblob" // file:// buckets; others need their driver imported by the binary
	"gocloud.dev/gcerrors"

	"github.com/logbook/logbook/session"
)

// Log is what the store needs of the session log.
type Log interface {
	PutFile(ctx context.Context, id session.ID, sha string, data []byte, inBucket bool) error
	FileContent(ctx context.Context, sha string) ([]byte, error)
}

// Store keeps file content by hash. It satisfies brain.FileReader.
type Store struct {
	log    Log
	bucket *blob.Bucket // nil: content in the database
}

// NewStore returns a store over log, keeping content in the database.
func NewStore(log Log) *Store { return &Store{log: log} }

// Open returns a store whose content lives in the bucket at blobURL (gocloud.dev/blob:
// file:///var/lib/logbook/files, s3://…, gs://…; "" keeps it in the database). The caller
// closes it.
func Open(ctx context.Context, log Log, blobURL string) (*Store, error) {
	if blobURL == "" {
		return NewStore(log), nil
	}
	b, err := blob.OpenBucket(ctx, blobURL)
	if err != nil {
		return nil, fmt.Errorf("LOGBOOK_BLOB_URL %s: %w", redacted(blobURL), err)
	}
	return &Store{log: log, bucket: b}, nil
}

func redacted(raw string) string {
	if u, err := url.Parse(raw); err == nil {
		return u.Redacted()
	}
	return "(unparsable URL)"
}

// Close closes the bucket, if any.
func (s *Store) Close() error {
	if s.bucket == nil {
		return nil
	}
	return s.bucket.Close()
}

func key(sha string) string { return "files/" + sha[:2] + "/" + sha }

// Put stores data for session id and returns its hash. The database's reference comes first,
// then the bucket's object: a retention run sweeping the same content away holds its row
// locked, so a share that races it waits, and writes the object after the sweep.
func (s *Store) Put(ctx context.Context, id session.ID, data []byte) (string, error) {
	sha := session.FileHash(data)
	if err := s.log.PutFile(ctx, id, sha, data, s.bucket != nil); err != nil {
		return "", err
	}
	if s.bucket != nil {
		if err := s.bucket.WriteAll(ctx, key(sha), data, nil); err != nil {
			return "", fmt.Errorf("store file %s in the bucket: %w", sha, err)
		}
	}
	return sha, nil
}

// FileContent returns the content stored under sha (session.ErrNotFound when there is none).
func (s *Store) FileContent(ctx context.Context, sha string) ([]byte, error) {
	data, err := s.log.FileContent(ctx, sha)
	if !errors.Is(err, session.ErrInBucket) {
		return data, err
	}
	if s.bucket == nil {
		return nil, fmt.Errorf("file %s is in a bucket and LOGBOOK_BLOB_URL is not set", sha)
	}
	data, err = s.bucket.ReadAll(ctx, key(sha))
	if gcerrors.Code(err) == gcerrors.NotFound {
		return nil, fmt.Errorf("file %s: %w", sha, session.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("read file %s from the bucket: %w", sha, err)
	}
	return data, nil
}

// Delete removes the bucket's copy of sha (after a retention purge left it unreferenced).
// Deleting what is not there is no error.
func (s *Store) Delete(ctx context.Context, sha string) error {
	if s.bucket == nil {
		return nil
	}
	if err := s.bucket.Delete(ctx, key(sha)); err != nil && gcerrors.Code(err) != gcerrors.NotFound {
		return fmt.Errorf("delete file %s from the bucket: %w", sha, err)
	}
	return nil
}
