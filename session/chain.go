package session

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"strconv"
	"strings"
)

// GenesisHash is the prev_hash of every session's first event: 32 zero bytes.
var GenesisHash = make([]byte, 32)

// Header returns the canonical header bytes the chain hashes for e. It matches the SQL
// function logbook_event_header byte for byte: "logbook-event-v1|session|seq|event id|
// len:type|len:actor kind|len:actor id|created_at in Unix microseconds|len:key or -".
func Header(e Event) []byte {
	lp := func(s string) string { return strconv.Itoa(len(s)) + ":" + s }
	key := "-"
	if e.IdempotencyKey != "" {
		key = lp(e.IdempotencyKey)
	}
	return []byte(strings.Join([]string{
		"logbook-event-v1",
		e.SessionID.String(),
		strconv.FormatInt(e.Seq, 10),
		e.ID.String(),
		lp(string(e.Type)),
		lp(string(e.Actor.Kind)),
		lp(e.Actor.ID),
		strconv.FormatInt(e.CreatedAt.UnixMicro(), 10),
		key,
	}, "|"))
}

// ChainHash returns sha256(prev || Header(e) || payloadHash).
func ChainHash(prev []byte, e Event, payloadHash []byte) []byte {
	h := sha256.New()
	h.Write(prev)
	h.Write(Header(e))
	h.Write(payloadHash)
	return h.Sum(nil)
}

// Verification is the outcome of verifying one session's chain.
type Verification struct {
	Session  ID
	Events   int64  // events checked
	HeadSeq  int64  // last seq checked
	HeadHash []byte // hash of the last event checked
	Purged   int64  // events whose payload was removed by retention (hash checked, payload not)
	OK       bool
	// BrokenSeq is the first seq that does not verify (0 when OK), and Reason says why.
	BrokenSeq int64
	Reason    string
}

const sqlVerify = `
SELECT ` + eventColumns + `, payload::text
FROM events WHERE session_id = $1 ORDER BY seq`

// Verify recomputes the session's chain in Go from the stored rows: dense seqs from 1, each
// prev_hash equal to the previous hash, each payload_hash equal to sha256 of the payload, and
// each hash equal to ChainHash. It reports the first broken seq; err is only for failures to
// read.
func (s *Store) Verify(ctx context.Context, id ID) (Verification, error) {
	return verifyChain(ctx, s.pool, id)
}

// verifyChain is Verify on q (the pool, or a transaction that rebuilds projections).
func verifyChain(ctx context.Context, q querier, id ID) (Verification, error) {
	v := Verification{Session: id, OK: true, HeadHash: GenesisHash}
	rows, err := q.Query(ctx, sqlVerify, id)
	if err != nil {
		return v, fmt.Errorf("verify session %s: %w", id, err)
	}
	defer rows.Close()
	prev := GenesisHash
	for rows.Next() {
		var e Event
		var typ, kind string
		var payload []byte
		var payloadText *string
		if err := rows.Scan(&e.SessionID, &e.Seq, &e.ID, &typ, &kind, &e.Actor.ID, &e.CreatedAt, &payload,
			&e.PayloadHash, &e.IdempotencyKey, &e.PrevHash, &e.Hash, &e.Sanitized, &e.Position, &payloadText); err != nil {
			return v, fmt.Errorf("verify session %s: %w", id, err)
		}
		e.Type, e.Actor.Kind = Type(typ), ActorKind(kind)
		if !v.OK {
			continue // drain; the first break is reported
		}
		v.Events++
		fail := func(reason string) {
			v.OK, v.BrokenSeq, v.Reason = false, e.Seq, reason
		}
		switch {
		case e.Seq != v.HeadSeq+1:
			fail(fmt.Sprintf("seq %d follows %d: the log has a gap", e.Seq, v.HeadSeq))
		case !bytes.Equal(e.PrevHash, prev):
			fail("prev_hash does not match the previous event's hash")
		case payloadText == nil:
			v.Purged++
		default:
			sum := sha256.Sum256([]byte(*payloadText))
			if !bytes.Equal(sum[:], e.PayloadHash) {
				fail("payload does not match payload_hash: the payload was changed")
			}
		}
		if v.OK && !bytes.Equal(ChainHash(prev, e, e.PayloadHash), e.Hash) {
			fail("hash does not match the event: a header field or hash was changed")
		}
		if v.OK {
			prev = e.Hash
			v.HeadSeq, v.HeadHash = e.Seq, e.Hash
		}
	}
	if err := rows.Err(); err != nil {
		return v, fmt.Errorf("verify session %s: %w", id, err)
	}
	return v, nil
}
