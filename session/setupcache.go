package session

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

const sqlSetupCache = `SELECT sha256 FROM setup_cache WHERE key = $1 ORDER BY id DESC LIMIT 1`

// SetupCache returns the stored workspace (its sha256 in the file store) of a setup's key;
// ErrNotFound when none was kept.
func (s *Store) SetupCache(ctx context.Context, key string) (string, error) {
	var sha string
	err := s.pool.QueryRow(ctx, sqlSetupCache, key).Scan(&sha)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return "", fmt.Errorf("setup cache %s: %w", key, ErrNotFound)
	case err != nil:
		return "", fmt.Errorf("read setup cache %s: %w", key, err)
	}
	return sha, nil
}

const sqlPutSetupCache = `INSERT INTO setup_cache (key, sha256, size, session_id) VALUES ($1, $2, $3, $4)`

// PutSetupCache records that the workspace stored as sha (size bytes) is key's, as session id
// left it.
func (s *Store) PutSetupCache(ctx context.Context, key, sha string, size int64, id ID) error {
	if _, err := s.pool.Exec(ctx, sqlPutSetupCache, key, sha, size, id); err != nil {
		return fmt.Errorf("keep setup cache %s: %w", key, err)
	}
	return nil
}
