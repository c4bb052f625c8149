-- Liveness claims: a dead replica's leases are free in seconds, not after their TTL.
--
-- Every replica that can (one with a dedicated connection, see session.Listen) holds, for its
-- whole life, a session-scoped advisory lock on hashtextextended(owner, 7461005): its
-- liveness claim (session.LockLivenessSeed). PostgreSQL releases the lock the moment that
-- connection ends, so a replica killed with SIGKILL, or whose host dies once TCP notices,
-- leaves its claim free at once.
--
-- leases.claimed says that the owner held its claim when it took the lease. Only such a
-- lease may be taken over before it expires, and only when its owner's claim is free (no
-- backend holds it). A lease taken by an owner without a claim (an older binary during a
-- rolling deploy, a replica without a LISTEN connection) is claimed = false and waits for its
-- expiry exactly as before. A replica alive but cut off still loses its sessions only
-- through expiry and the epoch fence: the claim check is an extra way in, never a way
-- around the fence (the takeover bumps the epoch, under the session's lock).

-- +goose Up
ALTER TABLE leases ADD COLUMN claimed boolean NOT NULL DEFAULT false;

-- logbook_claim_free reports whether no backend holds owner's liveness claim. It tries the
-- claim's key with a transaction-scoped lock, so the caller holds it at most until its
-- transaction ends (a statement, for the functions below): the caller never keeps it.
-- +goose StatementBegin
CREATE FUNCTION logbook_claim_free(p_owner text) RETURNS boolean
LANGUAGE sql VOLATILE AS $$
    SELECT pg_try_advisory_xact_lock(hashtextextended(p_owner, 7461005))
$$;
-- +goose StatementEnd

-- logbook_acquire_lease (with p_claimed) takes or renews a session's lease as the
-- three-argument version of 00001 does, and also takes a lease whose owner is dead: claimed,
-- unexpired, held by another owner whose claim is free. The epoch grows whenever the lease
-- changes hands. p_claimed records whether the caller holds its own claim.
-- +goose StatementBegin
CREATE FUNCTION logbook_acquire_lease(p_session uuid, p_owner text, p_ttl interval, p_claimed boolean)
RETURNS TABLE (epoch bigint, expires_at timestamptz)
LANGUAGE plpgsql AS $$
DECLARE
    v leases%ROWTYPE;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtextextended(p_session::text, 7461));
    SELECT * INTO v FROM leases l WHERE l.session_id = p_session;
    IF NOT FOUND THEN
        INSERT INTO leases AS l (session_id, owner, epoch, expires_at, claimed)
        VALUES (p_session, p_owner, 1, clock_timestamp() + p_ttl, p_claimed)
        RETURNING l.epoch, l.expires_at INTO epoch, expires_at;
        RETURN NEXT;
        RETURN;
    END IF;
    IF v.owner = p_owner AND v.expires_at > clock_timestamp() THEN
        UPDATE leases l SET expires_at = clock_timestamp() + p_ttl, claimed = p_claimed
         WHERE l.session_id = p_session
        RETURNING l.epoch, l.expires_at INTO epoch, expires_at;
        RETURN NEXT;
        RETURN;
    END IF;
    IF v.expires_at <= clock_timestamp() OR (v.claimed AND logbook_claim_free(v.owner)) THEN
        UPDATE leases l SET owner = p_owner, epoch = v.epoch + 1, expires_at = clock_timestamp() + p_ttl,
                            claimed = p_claimed
         WHERE l.session_id = p_session
        RETURNING l.epoch, l.expires_at INTO epoch, expires_at;
        RETURN NEXT;
    END IF;
END
$$;
-- +goose StatementEnd

-- The three-argument version (older binaries) takes leases without a claim, so that a lease
-- it takes over from a claimed owner is not left marked claimed.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION logbook_acquire_lease(p_session uuid, p_owner text, p_ttl interval)
RETURNS TABLE (epoch bigint, expires_at timestamptz)
LANGUAGE sql AS $$
    SELECT a.epoch, a.expires_at FROM logbook_acquire_lease(p_session, p_owner, p_ttl, false) a
$$;
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION logbook_acquire_lease(p_session uuid, p_owner text, p_ttl interval)
RETURNS TABLE (epoch bigint, expires_at timestamptz)
LANGUAGE plpgsql AS $$
DECLARE
    v leases%ROWTYPE;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtextextended(p_session::text, 7461));
    SELECT * INTO v FROM leases l WHERE l.session_id = p_session;
    IF NOT FOUND THEN
        INSERT INTO leases AS l (session_id, owner, epoch, expires_at)
        VALUES (p_session, p_owner, 1, clock_timestamp() + p_ttl)
        RETURNING l.epoch, l.expires_at INTO epoch, expires_at;
        RETURN NEXT;
        RETURN;
    END IF;
    IF v.owner = p_owner AND v.expires_at > clock_timestamp() THEN
        UPDATE leases l SET expires_at = clock_timestamp() + p_ttl
         WHERE l.session_id = p_session
        RETURNING l.epoch, l.expires_at INTO epoch, expires_at;
        RETURN NEXT;
        RETURN;
    END IF;
    IF v.expires_at <= clock_timestamp() THEN
        UPDATE leases l SET owner = p_owner, epoch = v.epoch + 1, expires_at = clock_timestamp() + p_ttl
         WHERE l.session_id = p_session
        RETURNING l.epoch, l.expires_at INTO epoch, expires_at;
        RETURN NEXT;
    END IF;
END
$$;
-- +goose StatementEnd
DROP FUNCTION logbook_acquire_lease(uuid, text, interval, boolean);
DROP FUNCTION logbook_claim_free(text);
ALTER TABLE leases DROP COLUMN claimed;
