package audit

import (
	"bufio"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"time"

	"github.com/logbook/logbook/session"
)

// ExportedSession is one session's events as an export holds them (events.jsonl), oldest
// first.
type ExportedSession struct {
	Session session.Session // Key.Team is not exported: empty
	Events  []session.Event
	// Whole says the export holds every event of the session: seqs 1..n with no gap, n its
	// head when the export ran (the manifest's sessions) — an export by actor or time window
	// may hold only part of a session.
	Whole bool
}

// exportedLine is one line of events.jsonl (format.go writes it).
type exportedLine struct {
	SessionID      string          `json:"session_id"`
	Channel        string          `json:"channel_id"`
	ThreadTS       string          `json:"thread_ts"`
	Seq            int64           `json:"seq"`
	EventID        string          `json:"event_id"`
	Type           string          `json:"type"`
	ActorKind      string          `json:"actor_kind"`
	ActorID        string          `json:"actor_id"`
	CreatedAt      string          `json:"created_at"`
	Payload        json.RawMessage `json:"payload"`
	Purged         bool            `json:"purged"`
	PayloadHash    string          `json:"payload_hash"`
	PrevHash       string          `json:"prev_hash"`
	Hash           string          `json:"hash"`
	IdempotencyKey *string         `json:"idempotency_key"`
	Sanitized      bool            `json:"sanitized"`
	Position       int64           `json:"position"`
}

// ReadExportedSessions reads the sessions of the export in dir (a local directory holding
// events.jsonl), in the order their first events appear. An export in CSV is refused:
// ErrInvalid.
func ReadExportedSessions(dir string) ([]ExportedSession, error) {
	f, err := os.Open(filepath.Join(dir, "events.jsonl"))
	if errors.Is(err, fs.ErrNotExist) {
		if _, csvErr := os.Stat(filepath.Join(dir, "events.csv")); csvErr == nil {
			return nil, fmt.Errorf("read export %s: %w: it is in CSV; export with --format jsonl", dir, ErrInvalid)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("read export %s: %w", dir, err)
	}
	defer f.Close()
	var out []ExportedSession
	at := map[string]int{}
	r := bufio.NewReader(f)
	for n := 1; ; n++ {
		line, err := r.ReadBytes('\n')
		if len(line) > 0 {
			var l exportedLine
			if jerr := json.Unmarshal(line, &l); jerr != nil {
				return nil, fmt.Errorf("read export %s: events.jsonl line %d: %w", dir, n, jerr)
			}
			e, s, cerr := l.event()
			if cerr != nil {
				return nil, fmt.Errorf("read export %s: events.jsonl line %d: %w", dir, n, cerr)
			}
			i, ok := at[l.SessionID]
			if !ok {
				i = len(out)
				at[l.SessionID] = i
				out = append(out, ExportedSession{Session: s})
			}
			out[i].Events = append(out[i].Events, e)
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("read export %s: %w", dir, err)
		}
	}
	heads := exportedHeads(dir)
	for i := range out {
		evs := out[i].Events
		out[i].Whole = true
		for j, e := range evs {
			if e.Seq != int64(j+1) {
				out[i].Whole = false
				break
			}
		}
		if head, ok := heads[out[i].Session.ID.String()]; ok && head > 0 && len(evs) > 0 && evs[len(evs)-1].Seq != head {
			out[i].Whole = false // the session went on past what the export holds
		}
	}
	return out, nil
}

// exportedHeads is each session's head seq when the export ran, from its manifest (empty
// when the manifest is missing or did not check chains).
func exportedHeads(dir string) map[string]int64 {
	heads := map[string]int64{}
	b, err := os.ReadFile(filepath.Join(dir, "manifest.json"))
	if err != nil {
		return heads
	}
	var m struct {
		Sessions []SessionChain `json:"sessions"`
	}
	if json.Unmarshal(b, &m) == nil {
		for _, s := range m.Sessions {
			heads[s.SessionID] = s.HeadSeq
		}
	}
	return heads
}

func (l exportedLine) event() (session.Event, session.Session, error) {
	sid, err := session.ParseID(l.SessionID)
	if err != nil {
		return session.Event{}, session.Session{}, err
	}
	e := session.Event{SessionID: sid, Seq: l.Seq, Type: session.Type(l.Type),
		Actor: session.Actor{Kind: session.ActorKind(l.ActorKind), ID: l.ActorID}, Sanitized: l.Sanitized, Position: l.Position}
	if e.ID, err = session.ParseID(l.EventID); err != nil {
		return e, session.Session{}, err
	}
	if e.CreatedAt, err = time.Parse(time.RFC3339Nano, l.CreatedAt); err != nil {
		return e, session.Session{}, err
	}
	if !l.Purged && len(l.Payload) > 0 && string(l.Payload) != "null" {
		e.Payload = l.Payload
	}
	if l.IdempotencyKey != nil {
		e.IdempotencyKey = *l.IdempotencyKey
	}
	for _, h := range []struct {
		hex string
		to  *[]byte
	}{{l.PayloadHash, &e.PayloadHash}, {l.PrevHash, &e.PrevHash}, {l.Hash, &e.Hash}} {
		if *h.to, err = hex.DecodeString(h.hex); err != nil {
			return e, session.Session{}, err
		}
	}
	return e, session.Session{ID: sid, Key: session.ThreadKey{Channel: l.Channel, ThreadTS: l.ThreadTS}}, nil
}

// ExportedFiles reads the content of the files an export holds (files/<sha256>, written by
// logbook audit export --with-files), by hash: a brain.FileReader over an export.
type ExportedFiles string

var sha256Hex = regexp.MustCompile(`^[0-9a-f]{64}$`)

// FileContent returns the content of the file whose sha256 (hex) is sum.
func (d ExportedFiles) FileContent(_ context.Context, sum string) ([]byte, error) {
	if !sha256Hex.MatchString(sum) {
		return nil, fmt.Errorf("read exported file %q: %w: not a sha256", sum, ErrInvalid)
	}
	return os.ReadFile(filepath.Join(string(d), "files", sum))
}
