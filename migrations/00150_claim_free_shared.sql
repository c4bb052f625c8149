-- logbook_claim_free tries a dead owner's liveness claim shared, not exclusive.
--
-- The claim's owner holds its key exclusive (session-scoped, on its LISTEN connection), so a
-- shared try fails while the owner lives, as the exclusive one did. Once it is dead, the
-- exclusive try of 00007 made every check a holder of the key until its transaction ended: a
-- peer's orphan scan (which tries it for each of the dead owner's sessions, in one statement)
-- or another lease take of the same owner's sessions made a concurrent logbook_acquire_lease
-- read the dead owner as alive and refuse the lease. After a kill -9, the first peer to find
-- the dead replica's sessions took one of them and was refused the rest, which went to later
-- polls one at a time: the last of eleven sessions was taken 0.9 s after the kill instead of
-- 0.1 s (issue 33's chaos run). Shared tries do not conflict with one another, so every
-- concurrent check of a dead owner answers free; who takes a session is still decided under
-- the session's own lock in logbook_acquire_lease, and a restarting owner's exclusive
-- pg_advisory_lock waits at most for the checks' transactions, as before.

-- +goose Up
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION logbook_claim_free(p_owner text) RETURNS boolean
LANGUAGE sql VOLATILE AS $$
    SELECT pg_try_advisory_xact_lock_shared(hashtextextended(p_owner, 7461005))
$$;
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION logbook_claim_free(p_owner text) RETURNS boolean
LANGUAGE sql VOLATILE AS $$
    SELECT pg_try_advisory_xact_lock(hashtextextended(p_owner, 7461005))
$$;
-- +goose StatementEnd
