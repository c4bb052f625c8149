-- Channel memory notes keep their tsvector (issue 53): searching the notes computed each
-- candidate note's tsvector from its text, in the GIN index's recheck and in the walk over
-- the newest notes, about 23 µs a note. At 400,000 notes a phrase of common words ("deploy
-- error") rechecked the 7,000 notes holding both words (170 ms), and a walk of the newest
-- notes could not go far. Stored, the tsvector is read, not computed: the walk goes on
-- cheaply and the recheck is a lookup. A purged note's text is NULL, so is its tsvector: it
-- leaves the index as before.

-- +goose Up
ALTER TABLE channel_memory ADD COLUMN tsv tsvector
    GENERATED ALWAYS AS (to_tsvector('english'::regconfig, text)) STORED;
CREATE INDEX channel_memory_tsv ON channel_memory USING gin (tsv);
DROP INDEX channel_memory_text;

-- +goose Down
CREATE INDEX channel_memory_text ON channel_memory USING gin (to_tsvector('english'::regconfig, text));
DROP INDEX channel_memory_tsv;
ALTER TABLE channel_memory DROP COLUMN tsv;
