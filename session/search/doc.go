// Package search is full-text search over the session log, in PostgreSQL.
//
// The log itself is never indexed for search (its appends stay as fast as a bare insert).
// Instead an [Indexer] projects it into search_docs (one row per user message, assistant
// message, tool call and tool result, with a GIN-indexed tsvector) and search_sessions (one
// row per session: title, first message, activity). The indexer reads the log with
// session.Store.ReadAll and keeps its cursor in search_cursor, in the same transaction as the
// rows it writes, so every committed event is indexed exactly once, even one whose
// transaction commits after later ones. Edits replace a message's text; a deletion empties
// it, so deleted text ("token is sk-XXXX") is no longer found. The raw event is kept in the
// log (it is append-only): only auditors see it, in transcripts.
//
// Channel memory notes are searched where they are kept (channel_memory, through a GIN index
// on their text; notes.go), not projected: Query.Kind picks messages (the default), notes, or
// both ranked together. A forgotten or purged note is not found.
//
// A [Searcher] answers websearch-style queries (words, "quoted phrases", -excluded, OR) with
// filters (actor, channel, session, time range), ranks by relevance blended with recency,
// and returns highlighted snippets and Slack permalinks. `logbook serve` runs
// [Indexer.Run]; one-shot commands call [Indexer.CatchUp] before they query.
//
// Lifecycle: NewIndexer, then Run(ctx) until ctx ends (it returns once its loop has
// stopped); NewSearcher needs nothing running, but returns only what has been indexed.
package search
