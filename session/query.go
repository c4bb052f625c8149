package session

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// column runs sql and returns its one column, every row; what names the operation in errors.
func column[T any](ctx context.Context, s *Store, what, sql string, args ...any) ([]T, error) {
	rows, err := s.pool.Query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	vs, err := pgx.CollectRows(rows, pgx.RowTo[T])
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return vs, nil
}
