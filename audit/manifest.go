package audit

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"gocloud.dev/blob"
	"gocloud.dev/gcerrors"

	"github.com/logbook/logbook/session"
)

// Manifest describes an export. Every time is UTC (TimeZone says so explicitly). It is the
// export's own versioned format: its counters look like session payloads' but are not them.
type Manifest struct {
	FormatVersion int           `json:"format_version"`
	Generator     Generator     `json:"generator"`
	GeneratedAt   time.Time     `json:"generated_at"`
	TimeZone      string        `json:"time_zone"`
	Query         ManifestQuery `json:"query"`
	// AsOf is the database's clock when the export began reading; WindowClosed says the
	// window had ended by then, so no event can still be added to it.
	AsOf          time.Time `json:"as_of"`
	WindowClosed  bool      `json:"window_closed"`
	Counts        Counts    `json:"counts"`
	FirstEventID  string    `json:"first_event_id,omitempty"`
	FirstPosition int64     `json:"first_position,omitempty"`
	LastEventID   string    `json:"last_event_id,omitempty"`
	LastPosition  int64     `json:"last_position,omitempty"`
	AccessRecords int64     `json:"access_records"`
	// WebAccessRecords counts the web pages' access records (web_access.*) in the window.
	WebAccessRecords int64          `json:"web_access_records"`
	ChainsChecked    bool           `json:"chains_checked"`
	Sessions         []SessionChain `json:"sessions"`
	Files            []File         `json:"files"`
	// WithFiles says the export includes the content of the files its events reference:
	// FileContents, one files/<sha256> each, and MissingFiles, what it could not include.
	WithFiles    bool          `json:"with_files,omitempty"`
	FileContents []ContentFile `json:"file_contents,omitempty"`
	MissingFiles []MissingFile `json:"missing_files,omitempty"`
	// SigningKey is the sha256 fingerprint (hex) of the public key whose signature is in
	// manifest.json.sig; empty when unsigned.
	SigningKey string `json:"signing_key,omitempty"`

	lastEventID  []byte
	lastPosition []byte
}

// Generator names the program that wrote an export.
type Generator struct {
	Name    string `json:"name"`
	Version string `json:"version"`
}

// ManifestQuery is the query of an export as run.
type ManifestQuery struct {
	Actors    []string  `json:"actors"` // empty: every actor
	Channel   string    `json:"channel,omitempty"`
	From      time.Time `json:"from"` // inclusive, UTC
	To        time.Time `json:"to"`   // exclusive, UTC
	InputZone string    `json:"input_zone"`
	Format    Format    `json:"format"`
	SQL       string    `json:"sql"`
}

// Counts are the export's event counts; ByActor keys are "kind:id".
type Counts struct {
	Events  int64            `json:"events"`
	ByType  map[string]int64 `json:"by_type"`
	ByActor map[string]int64 `json:"by_actor"`
}

// SessionChain is one exported session's chain, verified when the export ran.
type SessionChain struct {
	SessionID string `json:"session_id"`
	Exported  int64  `json:"exported"` // events of the session in the export
	ChainOK   bool   `json:"chain_ok"`
	Verified  int64  `json:"verified"` // events verified (the whole session)
	HeadSeq   int64  `json:"head_seq"`
	HeadHash  string `json:"head_hash,omitempty"`
	Purged    int64  `json:"purged"`
	BrokenSeq int64  `json:"broken_seq,omitempty"`
	Reason    string `json:"reason,omitempty"`
	// ForkOf is, for a fork, the session it was branched from (its session_forked event);
	// Forks the sessions branched from this one (issue 50).
	ForkOf *ForkRef  `json:"fork_of,omitempty"`
	Forks  []ForkRef `json:"forks,omitempty"`
}

// ForkRef is one end of a fork's reference: the other session and the parent's seq the fork
// was taken at; on a fork's link to its parent, the hash of the parent's event there and
// whether it verifies against the parent's chain (unless chains were not checked).
type ForkRef struct {
	SessionID string `json:"session_id"`
	Seq       int64  `json:"seq"`
	Hash      string `json:"hash,omitempty"`
	Verified  bool   `json:"verified,omitempty"`
	Reason    string `json:"reason,omitempty"`
}

// File is one file of an export.
type File struct {
	Name    string `json:"name"`
	SHA256  string `json:"sha256"`
	Bytes   int64  `json:"bytes"`
	Records int64  `json:"records"`
}

// ContentFile is the content of a file an exported event references, in the export as Name
// (files/<sha256>).
type ContentFile struct {
	Name   string `json:"name"`
	SHA256 string `json:"sha256"`
	Bytes  int64  `json:"bytes"`
}

// MissingFile is content an exported event references that the export does not include, and
// why: purged by retention, or (Mismatch) stored bytes that do not hash to it.
type MissingFile struct {
	SHA256   string `json:"sha256"`
	Reason   string `json:"reason"`
	Mismatch bool   `json:"mismatch,omitempty"`
}

// KeyFingerprint is the hex sha256 of an ed25519 public key.
func KeyFingerprint(pub ed25519.PublicKey) string {
	sum := sha256.Sum256(pub)
	return hex.EncodeToString(sum[:])
}

// writeSigned writes body at key and, when priv is set, its signature at key+".sig".
func writeSigned(ctx context.Context, dst *blob.Bucket, key string, body []byte, priv ed25519.PrivateKey) error {
	if err := dst.WriteAll(ctx, key, body, &blob.WriterOptions{ContentType: "application/json"}); err != nil {
		return fmt.Errorf("write %s: %w", key, err)
	}
	if priv == nil {
		return nil
	}
	sig := base64.StdEncoding.EncodeToString(ed25519.Sign(priv, body)) + "\n"
	if err := dst.WriteAll(ctx, key+".sig", []byte(sig), &blob.WriterOptions{ContentType: "text/plain"}); err != nil {
		return fmt.Errorf("write %s.sig: %w", key, err)
	}
	return nil
}

func writeManifest(ctx context.Context, dst *blob.Bucket, prefix string, m *Manifest, priv ed25519.PrivateKey) error {
	if priv != nil {
		m.SigningKey = KeyFingerprint(priv.Public().(ed25519.PublicKey))
	}
	body, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return fmt.Errorf("encode manifest: %w", err)
	}
	return writeSigned(ctx, dst, prefix+ManifestName, append(body, '\n'), priv)
}

// readSigned reads key and checks its signature at key+".sig" against pub. With pub nil, a
// signature is not checked and signed reports whether one exists. Errors wrap ErrTampered
// when the signature is missing (pub set) or does not verify.
func readSigned(ctx context.Context, src *blob.Bucket, key string, pub ed25519.PublicKey) (body []byte, signed bool, err error) {
	body, err = src.ReadAll(ctx, key)
	if err != nil {
		if gcerrors.Code(err) == gcerrors.NotFound {
			return nil, false, fmt.Errorf("read %s: %w", key, ErrNotFound)
		}
		return nil, false, fmt.Errorf("read %s: %w", key, err)
	}
	sig, err := src.ReadAll(ctx, key+".sig")
	switch {
	case gcerrors.Code(err) == gcerrors.NotFound:
		if pub != nil {
			return nil, false, fmt.Errorf("%s: %w: no signature (%s.sig), but a public key was given", key, ErrTampered, key)
		}
		return body, false, nil
	case err != nil:
		return nil, false, fmt.Errorf("read %s.sig: %w", key, err)
	}
	if pub == nil {
		return body, true, nil
	}
	raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(string(sig)))
	if err != nil || !ed25519.Verify(pub, body, raw) {
		return nil, true, fmt.Errorf("%s: %w: the ed25519 signature does not match (key %s)", key, ErrTampered, KeyFingerprint(pub)[:16])
	}
	return body, true, nil
}

// ExportCheck is what VerifyExport checked.
type ExportCheck struct {
	Manifest        Manifest
	SignatureValid  bool // the signature was checked against the given key and matches
	UncheckedSigned bool // the export is signed but no public key was given
}

// VerifyExport checks the export under prefix in src: the manifest parses, its signature
// verifies against pub (required when pub is set, and required to be given when the
// manifest says it is signed), every listed file (file contents under files/ included)
// exists with the listed size and sha256, and no other object is there (nor under files/). Every problem is reported, joined; each wraps ErrTampered.
func VerifyExport(ctx context.Context, src *blob.Bucket, prefix string, pub ed25519.PublicKey) (ExportCheck, error) {
	prefix = strings.TrimSuffix(prefix, "/")
	if prefix != "" {
		prefix += "/"
	}
	var check ExportCheck
	body, signed, err := readSigned(ctx, src, prefix+ManifestName, pub)
	if err != nil {
		return check, err
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&check.Manifest); err != nil {
		return check, fmt.Errorf("%s: %w: manifest does not parse: %v", prefix+ManifestName, ErrTampered, err)
	}
	m := check.Manifest
	check.SignatureValid = pub != nil
	if m.SigningKey != "" && pub == nil {
		check.UncheckedSigned = true
		return check, fmt.Errorf("%s: %w: the export is signed by key %s; give its public key to verify it",
			prefix+ManifestName, ErrInvalid, m.SigningKey)
	}
	if pub != nil && m.SigningKey != KeyFingerprint(pub) {
		return check, fmt.Errorf("%s: %w: signed by key %s, not the given key %s", prefix+ManifestName, ErrTampered,
			m.SigningKey, KeyFingerprint(pub))
	}
	if signed && m.SigningKey == "" {
		return check, fmt.Errorf("%s: %w: a signature exists but the manifest names no key", prefix+ManifestName, ErrTampered)
	}
	var errs []error
	listed := map[string]bool{ManifestName: true, SignatureName: signed}
	for _, f := range m.Files {
		listed[f.Name] = true
		if err := checkFile(ctx, src, prefix+f.Name, f); err != nil {
			errs = append(errs, err)
		}
	}
	for _, f := range m.FileContents {
		if !session.ValidFileHash(f.SHA256) || f.Name != FilesDir+f.SHA256 {
			errs = append(errs, fmt.Errorf("%s: %w: file content %q is not named %s<sha256>", prefix+ManifestName, ErrTampered, f.Name, FilesDir))
			continue
		}
		listed[f.Name] = true
		if err := checkFile(ctx, src, prefix+f.Name, File{Name: f.Name, SHA256: f.SHA256, Bytes: f.Bytes}); err != nil {
			errs = append(errs, err)
		}
	}
	errs = append(errs, unlisted(ctx, src, prefix, "", "/", listed)...)
	// File content is one level down: every object there must be listed too.
	errs = append(errs, unlisted(ctx, src, prefix, FilesDir, "", listed)...)
	return check, errors.Join(errs...)
}

// unlisted reports the objects under prefix+sub (listed with delimiter: "/" for one level,
// "" for all) whose name relative to the export's prefix the manifest does not list.
func unlisted(ctx context.Context, src *blob.Bucket, prefix, sub, delimiter string, listed map[string]bool) []error {
	var errs []error
	it := src.List(&blob.ListOptions{Prefix: prefix + sub, Delimiter: delimiter})
	for {
		obj, err := it.Next(ctx)
		if err == io.EOF {
			break
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("list %s: %w", prefix+sub, err))
			break
		}
		if obj.IsDir {
			continue
		}
		if name := strings.TrimPrefix(obj.Key, prefix); !listed[name] {
			errs = append(errs, fmt.Errorf("%s: %w: not listed in the manifest", obj.Key, ErrTampered))
		}
	}
	return errs
}

func checkFile(ctx context.Context, src *blob.Bucket, key string, f File) error {
	r, err := src.NewReader(ctx, key, nil)
	if err != nil {
		if gcerrors.Code(err) == gcerrors.NotFound {
			return fmt.Errorf("%s: %w: listed in the manifest but missing", key, ErrTampered)
		}
		return fmt.Errorf("read %s: %w", key, err)
	}
	defer r.Close()
	h := sha256.New()
	n, err := io.Copy(h, r)
	if err != nil {
		return fmt.Errorf("read %s: %w", key, err)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != f.SHA256 || n != f.Bytes {
		return fmt.Errorf("%s: %w: sha256 %s (%d bytes), manifest says %s (%d bytes)", key, ErrTampered, got, n, f.SHA256, f.Bytes)
	}
	return nil
}
