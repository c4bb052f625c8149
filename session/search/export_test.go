package search

import "context"

// PostingShare is the share of the table the GIN index steps through for text's lexemes, as
// the plan reads it from PostgreSQL's statistics.
func PostingShare(ctx context.Context, s *Searcher, text string) (float64, error) {
	var tsq string
	if err := s.pool.QueryRow(ctx, `SELECT `+tsQuery+`::text`, text).Scan(&tsq); err != nil {
		return 0, err
	}
	postings, _, err := s.wordShares(ctx, table{lexemes: lexemes(tsq), allRequired: allRequired(tsq)})
	return postings, err
}
