package audit

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"gocloud.dev/blob"

	"github.com/logbook/logbook/session"
)

// Verifier checks the log's chains, alone or against a checkpoint.
type Verifier struct {
	store *session.Store
}

// NewVerifier returns a verifier reading through store (an auditor's connection is enough).
func NewVerifier(store *session.Store) *Verifier { return &Verifier{store: store} }

// VerifyOptions select the sessions to verify.
type VerifyOptions struct {
	Session session.ID // only this session; zero: every session
	Since   time.Time  // only sessions with an event at or after Since; zero: all
}

// Finding is one session that does not verify, or a channel's ledger that disagrees with
// its projections.
type Finding struct {
	Session session.ID
	Seq     int64 // the first seq that does not verify (0: a projection row with no ledger event)
	Reason  string
	// Channel is set when the session is a channel's ledger; Change then names the
	// projection's change that disagrees ("setting_changed 12": its type and row), if it is
	// one ("" for a broken chain).
	Channel string
	Change  string
}

func (f Finding) String() string {
	switch {
	case f.Change != "":
		return session.LedgerFinding{Channel: f.Channel, Seq: f.Seq, Change: f.Change, Reason: f.Reason}.String()
	case f.Channel != "":
		return fmt.Sprintf("ledger of channel %s (session %s) is broken at seq %d: %s", f.Channel, f.Session, f.Seq, f.Reason)
	}
	return fmt.Sprintf("session %s is broken at seq %d: %s", f.Session, f.Seq, f.Reason)
}

// Report is the outcome of a verification. Findings are in session creation order, then the
// ledgers' disagreements with their projections, by channel.
type Report struct {
	Sessions int64 // sessions verified (channels' ledgers included)
	Ledgers  int64 // channels' ledgers among them
	Events   int64 // events verified
	Purged   int64 // events whose payload was purged (their hashes were checked)
	// BadForks is how many of the sessions are forks whose reference does not verify against
	// their parent's chain (each is also a finding at seq 1).
	BadForks int64
	Findings []Finding
}

// OK reports whether nothing was found.
func (r Report) OK() bool { return len(r.Findings) == 0 }

// Err returns nil when OK, otherwise an error wrapping ErrTampered that names the first
// broken session and seq.
func (r Report) Err() error {
	if r.OK() {
		return nil
	}
	return fmt.Errorf("%w: %s (%d findings)", ErrTampered, r.Findings[0], len(r.Findings))
}

// Verify recomputes the chain of every selected session (session.Store.Verify: dense seqs,
// prev hashes, payload hashes, event hashes), channels' ledgers included, and checks the
// selected ledgers' projections against them (session.Store.CheckLedgers: every ledger
// when no session is selected). err is only for failures to read; what does not verify is in
// the report.
func (v *Verifier) Verify(ctx context.Context, opts VerifyOptions) (Report, error) {
	ids, err := v.store.SessionIDs(ctx, session.SessionFilter{ID: opts.Session, Since: opts.Since})
	if err != nil {
		return Report{}, fmt.Errorf("verify: %w", err)
	}
	if opts.Session != (session.ID{}) && len(ids) == 0 {
		return Report{}, fmt.Errorf("verify session %s: %w", opts.Session, ErrNotFound)
	}
	ledgers, err := v.store.Ledgers(ctx)
	if err != nil {
		return Report{}, fmt.Errorf("verify: %w", err)
	}
	var r Report
	for _, id := range ids {
		res, err := v.store.Verify(ctx, id)
		if err != nil {
			return r, fmt.Errorf("verify: %w", err)
		}
		r.Sessions++
		r.Events += res.Events
		r.Purged += res.Purged
		channel, isLedger := ledgers[id]
		if isLedger {
			r.Ledgers++
		}
		if !res.OK {
			r.Findings = append(r.Findings, Finding{Session: id, Seq: res.BrokenSeq, Reason: res.Reason, Channel: channel})
		}
		if isLedger {
			continue
		}
		f, err := v.forkReference(ctx, id)
		if err != nil {
			return r, fmt.Errorf("verify: %w", err)
		}
		if f != nil {
			r.BadForks++
			r.Findings = append(r.Findings, *f)
		}
	}
	check := opts.Session == (session.ID{}) // every ledger: a row may have lost its event
	only := ""
	if channel, ok := ledgers[opts.Session]; ok {
		check, only = true, channel
	}
	if !check {
		return r, nil
	}
	fs, err := v.store.CheckLedgers(ctx, only)
	if err != nil {
		return r, fmt.Errorf("verify: %w", err)
	}
	byChannel := make(map[string]session.ID, len(ledgers))
	for id, ch := range ledgers {
		byChannel[ch] = id
	}
	for _, f := range fs {
		r.Findings = append(r.Findings, Finding{Session: byChannel[f.Channel], Seq: f.Seq, Reason: f.Reason, Channel: f.Channel, Change: f.Change})
	}
	return r, nil
}

// forkReference checks session id's fork reference (session.Store.VerifyFork: the parent's
// chain through the seq, and the hash of its event there): nil when id is no fork or its
// reference verifies, else the finding at seq 1 (the session_forked event). A fork whose own
// first event was tampered with is its chain's finding already.
func (v *Verifier) forkReference(ctx context.Context, id session.ID) (*Finding, error) {
	first, err := v.store.Events(ctx, id, session.Range{From: 1, To: 1})
	if err != nil {
		return nil, err
	}
	if rp, ok, err := session.ReplayOf(first); err != nil || ok {
		return v.replayLink(ctx, id, rp, err)
	}
	fk, ok, err := session.ForkedBy(first)
	if err != nil {
		return &Finding{Session: id, Seq: 1, Reason: "the fork's reference is not readable: " + err.Error()}, nil
	}
	if !ok {
		return nil, nil
	}
	c, err := v.store.VerifyFork(ctx, id, fk)
	if err != nil || c.OK {
		return nil, err
	}
	return &Finding{Session: id, Seq: 1, Reason: fmt.Sprintf("fork of session %s at seq %d: %s", fk.Parent, fk.Seq, c.Reason)}, nil
}

// replayLink checks an eval record's link to its original (session.Store.VerifyReplay): nil
// when it verifies, else the finding at seq 1 (the replay_started event).
func (v *Verifier) replayLink(ctx context.Context, id session.ID, rp session.ReplayStarted, readErr error) (*Finding, error) {
	if readErr != nil {
		return &Finding{Session: id, Seq: 1, Reason: "the eval record's link is not readable: " + readErr.Error()}, nil
	}
	c, err := v.store.VerifyReplay(ctx, id, rp)
	if err != nil || c.OK {
		return nil, err
	}
	return &Finding{Session: id, Seq: 1, Reason: fmt.Sprintf("eval record of session %s at seq %d: %s", rp.Original, rp.Seq, c.Reason)}, nil
}

// Checkpoint is every session's head at a moment, kept outside the database so that a chain
// rewritten consistently inside it (triggers disabled, every hash recomputed) is detected.
type Checkpoint struct {
	FormatVersion int              `json:"format_version"`
	TakenAt       time.Time        `json:"taken_at"` // database clock, UTC
	Heads         []CheckpointHead `json:"heads"`
	SigningKey    string           `json:"signing_key,omitempty"`
}

// CheckpointHead is one session's head.
type CheckpointHead struct {
	Session session.ID `json:"session_id"`
	Seq     int64      `json:"seq"`
	Hash    string     `json:"hash"` // hex
}

// TakeCheckpoint reads every session's head in one snapshot.
func (v *Verifier) TakeCheckpoint(ctx context.Context) (Checkpoint, error) {
	cp := Checkpoint{FormatVersion: 1, Heads: []CheckpointHead{}}
	at, err := v.store.Heads(ctx, func(h session.SessionHead) error {
		cp.Heads = append(cp.Heads, CheckpointHead{Session: h.Session, Seq: h.Seq, Hash: hex.EncodeToString(h.Hash)})
		return nil
	})
	if err != nil {
		return Checkpoint{}, fmt.Errorf("take checkpoint: %w", err)
	}
	cp.TakenAt = at.UTC()
	return cp, nil
}

// WriteCheckpoint writes cp as JSON at key in dst, signed at key+".sig" when priv is set.
func WriteCheckpoint(ctx context.Context, dst *blob.Bucket, key string, cp Checkpoint, priv ed25519.PrivateKey) error {
	if priv != nil {
		cp.SigningKey = KeyFingerprint(priv.Public().(ed25519.PublicKey))
	}
	body, err := json.MarshalIndent(cp, "", "  ")
	if err != nil {
		return fmt.Errorf("encode checkpoint: %w", err)
	}
	return writeSigned(ctx, dst, key, append(body, '\n'), priv)
}

// ReadCheckpoint reads a checkpoint and, when pub is set, checks its signature. A signed
// checkpoint read without a key is an error, as is any signature that does not verify
// (ErrTampered).
func ReadCheckpoint(ctx context.Context, src *blob.Bucket, key string, pub ed25519.PublicKey) (Checkpoint, error) {
	body, _, err := readSigned(ctx, src, key, pub)
	if err != nil {
		return Checkpoint{}, err
	}
	var cp Checkpoint
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&cp); err != nil {
		return Checkpoint{}, fmt.Errorf("checkpoint %s: %w: does not parse: %v", key, ErrTampered, err)
	}
	if cp.SigningKey != "" && pub == nil {
		return Checkpoint{}, fmt.Errorf("checkpoint %s: %w: signed by key %s; give its public key", key, ErrInvalid, cp.SigningKey)
	}
	if pub != nil && cp.SigningKey != KeyFingerprint(pub) {
		return Checkpoint{}, fmt.Errorf("checkpoint %s: %w: signed by key %s, not the given key", key, ErrTampered, cp.SigningKey)
	}
	return cp, nil
}

// VerifyAgainst verifies every session of the checkpoint (whole chains, as Verify) and
// checks that the event at each checkpointed head still has the checkpointed hash: a chain
// rewritten consistently since the checkpoint differs there, and a truncated one lacks it.
// Sessions created after the checkpoint are verified by Verify, not here.
func (v *Verifier) VerifyAgainst(ctx context.Context, cp Checkpoint) (Report, error) {
	var r Report
	ledgers, err := v.store.Ledgers(ctx)
	if err != nil {
		return r, fmt.Errorf("verify against checkpoint: %w", err)
	}
	for _, h := range cp.Heads {
		res, err := v.store.Verify(ctx, h.Session)
		if err != nil {
			return r, fmt.Errorf("verify against checkpoint: %w", err)
		}
		r.Sessions++
		r.Events += res.Events
		r.Purged += res.Purged
		hash, err := v.store.HashAt(ctx, h.Session, h.Seq)
		switch {
		case errors.Is(err, session.ErrNotFound):
			r.Findings = append(r.Findings, Finding{Session: h.Session, Seq: h.Seq,
				Reason: fmt.Sprintf("the event at the checkpoint's head (taken %s) is gone", cp.TakenAt.Format(time.RFC3339))})
			continue
		case err != nil:
			return r, fmt.Errorf("verify against checkpoint: session %s: %w", h.Session, err)
		}
		if got := hex.EncodeToString(hash); got != h.Hash {
			// Report the rewrite at the earliest seq the chain alone cannot explain: the
			// checkpoint's head (earlier seqs may differ too; the checkpoint only knows the head).
			r.Findings = append(r.Findings, Finding{Session: h.Session, Seq: h.Seq,
				Reason: fmt.Sprintf("hash %s differs from the checkpoint's %s (taken %s): the chain was rewritten",
					short(got), short(h.Hash), cp.TakenAt.Format(time.RFC3339))})
			continue
		}
		if !res.OK {
			r.Findings = append(r.Findings, Finding{Session: h.Session, Seq: res.BrokenSeq, Reason: res.Reason})
		}
	}
	for i := range r.Findings { // a channel's ledger is named by its channel
		r.Findings[i].Channel = ledgers[r.Findings[i].Session]
	}
	return r, nil
}

func short(h string) string {
	if len(h) > 16 {
		return h[:16]
	}
	return h
}
