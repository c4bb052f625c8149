-- Channel memory notes are searchable (issue 49): `logbook search` and the web search find
-- them, beside the sessions' messages or alone (session/search, kind notes). A GIN index on
-- the note's text serves the search; the query must use this very expression. A purged
-- note's text is NULL (logbook_purge_memory), so it leaves the index; a forgotten one is left
-- out by the query (channel_memory_forgotten), not by the index.

-- +goose Up
CREATE INDEX channel_memory_text ON channel_memory USING gin (to_tsvector('english'::regconfig, text));

-- +goose Down
DROP INDEX channel_memory_text;
