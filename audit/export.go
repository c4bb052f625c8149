package audit

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"gocloud.dev/blob"
	"golang.org/x/sync/errgroup"

	"github.com/logbook/logbook/session"
)

// Query selects the events of an export.
type Query struct {
	// Actors are actor ids (a Slack user id, the bot's user id, a system part's name); empty:
	// every actor.
	Actors  []string
	Channel string    // a Slack channel id; empty: every channel
	From    time.Time // inclusive
	To      time.Time // exclusive
	Format  Format    // "" is JSONL
	// Zone is the time zone the caller gave From and To in (e.g. "America/Los_Angeles"),
	// recorded in the manifest; every time in an export is UTC. "" is UTC.
	Zone string
}

func (q Query) validate() error {
	if q.From.IsZero() || q.To.IsZero() || !q.To.After(q.From) {
		return fmt.Errorf("%w: the window needs from < to (got %s .. %s)", ErrInvalid, q.From, q.To)
	}
	for _, a := range q.Actors {
		if a == "" {
			return fmt.Errorf("%w: empty actor id", ErrInvalid)
		}
	}
	_, err := ParseFormat(string(q.Format))
	return err
}

// ExporterOptions configure an Exporter. Zero values take defaults.
type ExporterOptions struct {
	Now        func() time.Time   // the manifest's generated_at; default time.Now
	Version    string             // generator version in the manifest; default "dev"
	SigningKey ed25519.PrivateKey // when set, manifest.json is signed
	// SkipChains leaves out the chain verification of the exported sessions (the manifest
	// says so). Only for measuring the export alone.
	SkipChains bool
	// Settle is how long after a window's end the export waits before reading it, for
	// writers that took an event's time but not yet a transaction id (default 1s).
	Settle time.Duration
	// ChainWorkers is how many sessions' chains are verified at once (default 4).
	ChainWorkers int
	// SpoolDir holds an export's files while its transaction reads them; they are uploaded
	// to the destination after it ends (default: os.TempDir()). It needs room for the
	// largest export.
	SpoolDir string
	// Overwrite lets an export replace an earlier one under its prefix: the earlier export's
	// files are deleted (ClearExport) once the new one's are read and spooled, before they are
	// uploaded. An object there that is no export's file is never deleted: Export refuses
	// (ErrNotEmpty), as it refuses any object there without Overwrite.
	Overwrite bool
	// Files, when set, reads the content of the files the exported events reference (a
	// file_fetched that stored one, a file_upload, by their sha256): each is written as
	// files/<sha256> and listed in the manifest (file_contents); content that is gone
	// (purged by retention) is listed as missing (missing_files), which fails nothing.
	// nil: events list files by hash only.
	Files FileReader
	// Standby, when set, is a streaming standby of the pool's primary (its pools are the
	// auditor's on each): once the window is final (waited for on the primary, which alone
	// knows its running transactions), the export reads its snapshot and verifies its chains on
	// the standby after the standby has replayed the primary's position then, else (lagging
	// past the standby's MaxWait, or not answering) on the primary. Either way the files hold
	// the same bytes for a closed window. A standby that fails in the middle of the read fails
	// the export (nothing is published); run it again.
	Standby *session.Standby
}

// source is what an export reads its snapshot and chains from.
type source struct {
	pool  *pgxpool.Pool
	store *session.Store
}

// source is the standby, when there is one and it has caught up with the primary, else the
// primary.
func (x *Exporter) source(ctx context.Context) source {
	src := source{pool: x.pool, store: x.store}
	if sb := x.opts.Standby; sb != nil {
		onStandby := source{pool: sb.StandbyPool(), store: session.NewStore(sb.StandbyPool(), session.Options{})}
		session.ReadFrom(ctx, sb, session.ReadYourWrites, onStandby, src, func(s source) error { //nolint:errcheck // never fails
			src = s
			return nil
		})
	}
	return src
}

// FileReader reads stored file content by its sha256 (filestore.Store has it):
// session.ErrNotFound when there is none.
type FileReader interface {
	FileContent(ctx context.Context, sha string) ([]byte, error)
}

// FilesDir is the folder of an export that holds file content, by sha256.
const FilesDir = "files/"

// Exporter writes exports. It is safe for concurrent use.
type Exporter struct {
	store *session.Store
	pool  *pgxpool.Pool
	opts  ExporterOptions
}

// NewExporter returns an exporter that reads audit's tables (access records) through pool and
// verifies chains through store; an auditor's connection is enough for both. An export reads
// its events (with session.ScanEventText) and its access records in one read-only
// repeatable-read transaction on pool, so both files show the same moment.
func NewExporter(store *session.Store, pool *pgxpool.Pool, opts ExporterOptions) *Exporter {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	opts.Version = cmp.Or(opts.Version, "dev")
	opts.Settle = cmp.Or(opts.Settle, time.Second)
	opts.ChainWorkers = cmp.Or(opts.ChainWorkers, 4)
	return &Exporter{store: store, pool: pool, opts: opts}
}

// Export file names inside an export's prefix.
const (
	ManifestName  = "manifest.json"
	SignatureName = "manifest.json.sig"
)

// eventColumns names the values of session.ScanEventText, in its order: the export's
// fields.
var eventColumns = []string{"position", "session_id", "channel_id", "thread_ts", "seq", "event_id", "type",
	"actor_kind", "actor_id", "created_at", "payload", "payload_hash", "prev_hash", "hash",
	"idempotency_key", "sanitized"}

// filter is the query's selection of the log.
func (q Query) filter() session.EventFilter {
	return session.EventFilter{From: q.From, To: q.To, Actors: q.Actors, Channel: q.Channel}
}

const sqlAccessInWindow = `
SELECT id, to_char(at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'), who, who_kind, who_source, db_user,
       action, filters::text
FROM audit_access WHERE at >= $1 AND at < $2 ORDER BY at, id`

// Export writes the events selected by q, the access records of the window (audit commands'
// in access.*, the web pages' in web_access.*), and the manifest (signed when a key is
// configured) under prefix in dst, and returns the manifest. It waits first for transactions
// running at its start to finish (see the package doc).
// Errors: ErrInvalid for a bad query; ErrNotEmpty when prefix holds objects already (with
// ExporterOptions.Overwrite: objects that are no export's files), before anything is read or
// written; otherwise database or destination failures, in which case the files written so
// far are incomplete and no manifest is written.
func (x *Exporter) Export(ctx context.Context, q Query, dst *blob.Bucket, prefix string) (Manifest, error) {
	if err := q.validate(); err != nil {
		return Manifest{}, fmt.Errorf("export: %w", err)
	}
	q.Format, _ = ParseFormat(string(q.Format))
	prefix = normPrefix(prefix)
	if err := checkEmpty(ctx, dst, prefix, x.opts.Overwrite); err != nil {
		return Manifest{}, fmt.Errorf("export %s: %w", q.window(), err)
	}
	asOf, err := waitForInflight(ctx, x.pool, q.To, x.opts.Settle)
	if err != nil {
		return Manifest{}, fmt.Errorf("export %s: %w", q.window(), err)
	}
	m := x.newManifest(q, asOf)
	src := x.source(ctx)
	sessions, refs, err := x.writeSnapshot(ctx, src.pool, q, dst, prefix, &m)
	if err != nil {
		return Manifest{}, fmt.Errorf("export %s: %w", q.window(), err)
	}
	if refs != nil {
		if err := x.writeContents(ctx, dst, prefix, refs, &m); err != nil {
			return Manifest{}, fmt.Errorf("export %s: %w", q.window(), err)
		}
	}
	if err := x.verifyChains(ctx, src.store, sessions, &m); err != nil {
		return Manifest{}, fmt.Errorf("export %s: %w", q.window(), err)
	}
	if err := writeManifest(ctx, dst, prefix, &m, x.opts.SigningKey); err != nil {
		return Manifest{}, fmt.Errorf("export %s: %w", q.window(), err)
	}
	return m, nil
}

// newManifest is the manifest of q read at asOf, before its files are written.
func (x *Exporter) newManifest(q Query, asOf time.Time) Manifest {
	m := Manifest{
		FormatVersion: 1,
		Generator:     Generator{Name: "logbook audit", Version: x.opts.Version},
		GeneratedAt:   x.opts.Now().UTC(),
		TimeZone:      "UTC",
		Query: ManifestQuery{
			Actors: q.Actors, Channel: q.Channel, From: q.From.UTC(), To: q.To.UTC(),
			InputZone: cmp.Or(q.Zone, "UTC"), Format: q.Format, SQL: q.filter().SQL(),
		},
		AsOf:         asOf.UTC(),
		WindowClosed: !q.To.After(asOf),
		Counts:       Counts{ByType: map[string]int64{}, ByActor: map[string]int64{}},
	}
	if m.Query.Actors == nil {
		m.Query.Actors = []string{}
	}
	return m
}

// writeSnapshot writes the event and record files, read in one read-only repeatable-read
// transaction, and lists them in m. It returns the exported events' count by session and,
// when the export includes file content, the content they reference. The files are spooled
// locally while the snapshot reads and uploaded once it has ended: a destination slow to take
// or close a file must not hold the transaction open. With Overwrite, the earlier export is
// cleared only then, once the new one's files are ready.
func (x *Exporter) writeSnapshot(ctx context.Context, pool *pgxpool.Pool, q Query, dst *blob.Bucket, prefix string, m *Manifest) (sessions map[string]int64, refs map[string]bool, err error) {
	ext := string(q.Format)
	sessions = map[string]int64{}
	if x.opts.Files != nil {
		refs = map[string]bool{}
	}
	tx, err := pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return nil, nil, fmt.Errorf("begin: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // read-only
	var staged []*objectWriter
	defer func() {
		for _, o := range staged {
			o.abort()
		}
	}()
	eo, ef, err := x.writeEvents(ctx, tx, q, dst, prefix+"events."+ext, m, sessions, refs)
	if err != nil {
		return nil, nil, err
	}
	staged = append(staged, eo)
	ao, af, err := writeAccess(ctx, tx, q, dst, prefix+"access."+ext, x.opts.SpoolDir)
	if err != nil {
		return nil, nil, err
	}
	staged = append(staged, ao)
	wo, wf, err := writeWebAccess(ctx, tx, q, dst, prefix+"web_access."+ext, x.opts.SpoolDir)
	if err != nil {
		return nil, nil, err
	}
	staged = append(staged, wo)
	// The model spend and budget raises of the window (spend.go): the usage figures.
	so, sf, err := writeRecords(ctx, tx, q, dst, prefix+"spend."+ext, x.opts.SpoolDir, "spend records", sqlSpendInWindow, spendRecordColumns, q.Channel)
	if err != nil {
		return nil, nil, err
	}
	staged = append(staged, so)
	ro, rf, err := writeRecords(ctx, tx, q, dst, prefix+"budget_raises."+ext, x.opts.SpoolDir, "budget raises", sqlRaisesInWindow, raiseRecordColumns, q.Channel)
	if err != nil {
		return nil, nil, err
	}
	staged = append(staged, ro)
	// The sessions logbook starts itself (started.go): schedules, their ticks, hook deliveries,
	// their runs and pauses.
	var started []File
	for _, r := range []struct {
		name, what, query string
		cols              []recordColumn
	}{
		{"schedules", "schedule records", sqlSchedulesInWindow, scheduleRecordColumns},
		{"schedule_ticks", "schedule ticks", sqlTicksInWindow, tickRecordColumns},
		{"hook_deliveries", "hook deliveries", sqlHooksInWindow, hookRecordColumns},
		{"automations", "schedules' and hooks' runs and pauses", sqlAutomationsInWindow, automationRecordColumns},
	} {
		o, f, err := writeRecords(ctx, tx, q, dst, prefix+r.name+"."+ext, x.opts.SpoolDir, r.what, r.query, r.cols, q.Channel)
		if err != nil {
			return nil, nil, err
		}
		staged = append(staged, o)
		f.Name = r.name + "." + ext
		started = append(started, f)
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, nil, err
	}
	if x.opts.Overwrite {
		if err := ClearExport(ctx, dst, prefix); err != nil {
			return nil, nil, err
		}
	}
	for _, o := range staged {
		if err := o.publish(ctx); err != nil {
			return nil, nil, err
		}
	}
	ef.Name, af.Name, wf.Name, sf.Name, rf.Name = "events."+ext, "access."+ext, "web_access."+ext, "spend."+ext, "budget_raises."+ext
	m.Files = append([]File{ef, af, wf, sf, rf}, started...)
	m.AccessRecords, m.WebAccessRecords = af.Records, wf.Records
	return sessions, refs, nil
}

// verifyChains verifies the chains of the exported sessions (unless SkipChains) and lists
// them in m, in id order.
func (x *Exporter) verifyChains(ctx context.Context, store *session.Store, sessions map[string]int64, m *Manifest) error {
	ids := make([]string, 0, len(sessions))
	for id := range sessions {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	m.ChainsChecked = !x.opts.SkipChains
	m.Sessions = make([]SessionChain, len(ids))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(x.opts.ChainWorkers)
	for i, id := range ids {
		m.Sessions[i] = SessionChain{SessionID: id, Exported: sessions[id]}
		g.Go(func() error {
			sid, err := session.ParseID(id)
			if err != nil {
				return err
			}
			if err := forkLinks(gctx, store, sid, &m.Sessions[i], !x.opts.SkipChains); err != nil {
				return err
			}
			if x.opts.SkipChains {
				return nil
			}
			v, err := store.Verify(gctx, sid)
			if err != nil {
				return err
			}
			sc := &m.Sessions[i]
			sc.ChainOK, sc.Verified, sc.HeadSeq, sc.HeadHash = v.OK, v.Events, v.HeadSeq, hex.EncodeToString(v.HeadHash)
			sc.Purged, sc.BrokenSeq, sc.Reason = v.Purged, v.BrokenSeq, v.Reason
			return nil
		})
	}
	return g.Wait()
}

// forkLinks fills sc's links to the session's parent (with its reference checked when check)
// and to the sessions branched from it.
func forkLinks(ctx context.Context, store *session.Store, id session.ID, sc *SessionChain, check bool) error {
	forks, err := store.Forks(ctx, id)
	if err != nil {
		return err
	}
	for _, f := range forks {
		sc.Forks = append(sc.Forks, ForkRef{SessionID: f.Session.String(), Seq: f.Seq})
	}
	first, err := store.Events(ctx, id, session.Range{From: 1, To: 1})
	if err != nil {
		return err
	}
	f, ok, err := session.ForkedBy(first)
	if err != nil || !ok {
		return nil //nolint:nilerr // an unreadable reference is audit verify's finding, not the export's failure
	}
	sc.ForkOf = &ForkRef{SessionID: f.Parent.String(), Seq: f.Seq, Hash: f.Hash}
	if !check {
		return nil
	}
	c, err := store.VerifyFork(ctx, id, f)
	if err != nil {
		return err
	}
	sc.ForkOf.Verified, sc.ForkOf.Reason = c.OK, c.Reason
	return nil
}

func (q Query) window() string { return Window{Start: q.From, End: q.To}.String() }

// waitForInflight makes the window's past final and returns the database's clock. An
// event's created_at is taken just before its transaction gets its id, so when to is at most
// settle in the past it first waits until it is. Then it takes a fresh transaction id X and a
// snapshot: every transaction older than X that is still running is in the snapshot's
// in-progress list. It waits until those of this database have finished (transaction ids are
// cluster-wide; other databases' writers cannot add events here). After that every event with
// created_at < to is committed or never will be. A window still open at the database's clock
// is read as it is (the manifest says window_closed false).
func waitForInflight(ctx context.Context, db dbtx, to time.Time, settle time.Duration) (time.Time, error) {
	var now time.Time
	if err := db.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&now); err != nil {
		return time.Time{}, fmt.Errorf("read database clock: %w", err)
	}
	if !to.After(now) && now.Sub(to) < settle {
		if err := sleepCtx(ctx, settle-now.Sub(to)); err != nil {
			return time.Time{}, fmt.Errorf("wait for writers of the window: %w", err)
		}
	}
	var xid string
	if err := db.QueryRow(ctx, `SELECT pg_current_xact_id()::text, clock_timestamp()`).Scan(&xid, &now); err != nil {
		return time.Time{}, fmt.Errorf("take a transaction id: %w", err)
	}
	// 32-bit xids as pg_locks shows them, of the transactions older than X still running.
	const sqlOlder = `
SELECT coalesce(array_agg((x::text::numeric % 4294967296)::text), '{}')
FROM pg_snapshot_xip(pg_current_snapshot()) AS x WHERE x < $1::text::xid8`
	var older []string
	if err := db.QueryRow(ctx, sqlOlder, xid).Scan(&older); err != nil {
		return time.Time{}, fmt.Errorf("list running transactions: %w", err)
	}
	const sqlRunningHere = `/* audit: wait for writers */
SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
WHERE l.locktype = 'transactionid' AND l.granted AND a.datname = current_database()
  AND l.transactionid::text = ANY($1::text[])`
	delay := 5 * time.Millisecond
	for len(older) > 0 {
		var running int
		if err := db.QueryRow(ctx, sqlRunningHere, older).Scan(&running); err != nil {
			return time.Time{}, fmt.Errorf("wait for running transactions: %w", err)
		}
		if running == 0 {
			break
		}
		if err := sleepCtx(ctx, delay); err != nil {
			return time.Time{}, fmt.Errorf("wait for %d transactions older than %s: %w", running, xid, err)
		}
		delay = min(2*delay, time.Second)
	}
	return now, nil
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// objectWriter writes one object and measures it: bytes, sha256, records. It spools to a
// local temporary file while the export's transaction reads, and uploads only after the
// transaction has ended (publish): a slow destination (an upload, a Close that takes
// seconds) must never hold the snapshot open, or PostgreSQL ends it
// (idle_in_transaction_session_timeout, SQLSTATE 25P03).
type objectWriter struct {
	dst         *blob.Bucket
	key         string
	contentType string
	f           *os.File
	buf         *bufio.Writer
	sum         hash.Hash
	n           int64
	records     int64
	line        []byte
}

func newObjectWriter(_ context.Context, dst *blob.Bucket, key, contentType, spoolDir string) (*objectWriter, error) {
	f, err := os.CreateTemp(spoolDir, "logbook-export-*")
	if err != nil {
		return nil, fmt.Errorf("create %s: spool: %w", key, err)
	}
	o := &objectWriter{dst: dst, key: key, contentType: contentType, f: f, sum: sha256.New(), line: make([]byte, 0, 4096)}
	o.buf = bufio.NewWriterSize(io.MultiWriter(f, o.sum), 256<<10)
	return o, nil
}

func (o *objectWriter) writeLine(b []byte) error {
	o.n += int64(len(b))
	_, err := o.buf.Write(b)
	return err
}

// abort discards the spooled object; nothing reaches the destination. Safe to call twice.
func (o *objectWriter) abort() {
	if o.f == nil {
		return
	}
	o.f.Close() //nolint:errcheck // discarding
	os.Remove(o.f.Name())
	o.f = nil
}

// close flushes the spool and returns what the object will be; publish uploads it. On error
// the spool is discarded.
func (o *objectWriter) close(name string) (File, error) {
	if err := o.buf.Flush(); err != nil {
		o.abort()
		return File{}, fmt.Errorf("write %s: %w", name, err)
	}
	return File{Name: name, SHA256: hex.EncodeToString(o.sum.Sum(nil)), Bytes: o.n, Records: o.records}, nil
}

// publish uploads the spooled object to its key and removes the spool. A failed upload is
// aborted where the driver can (a cancelled writer's Close does not commit).
func (o *objectWriter) publish(ctx context.Context) error {
	defer o.abort()
	if _, err := o.f.Seek(0, io.SeekStart); err != nil {
		return fmt.Errorf("write %s: spool: %w", o.key, err)
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w, err := o.dst.NewWriter(wctx, o.key, &blob.WriterOptions{ContentType: o.contentType})
	if err != nil {
		return fmt.Errorf("create %s: %w", o.key, err)
	}
	if _, err := io.Copy(w, o.f); err != nil {
		cancel()
		w.Close() //nolint:errcheck // aborting
		return fmt.Errorf("write %s: %w", o.key, err)
	}
	if err := w.Close(); err != nil {
		return fmt.Errorf("write %s: %w", o.key, err)
	}
	return nil
}

// writeContents writes the content of every file in refs (by sha256) as files/<sha256> under
// prefix, one at a time, and lists it in the manifest; content the store no longer has, or
// whose bytes do not hash to their name, is listed as missing instead.
func (x *Exporter) writeContents(ctx context.Context, dst *blob.Bucket, prefix string, refs map[string]bool, m *Manifest) error {
	m.WithFiles = true
	shas := make([]string, 0, len(refs))
	for sha := range refs {
		shas = append(shas, sha)
	}
	slices.Sort(shas)
	for _, sha := range shas {
		data, err := x.opts.Files.FileContent(ctx, sha)
		switch {
		case errors.Is(err, session.ErrNotFound):
			m.MissingFiles = append(m.MissingFiles, MissingFile{SHA256: sha, Reason: "not in the file store (purged by retention)"})
			continue
		case err != nil:
			return fmt.Errorf("read file %s: %w", sha, err)
		case session.FileHash(data) != sha:
			m.MissingFiles = append(m.MissingFiles, MissingFile{SHA256: sha, Mismatch: true,
				Reason: "the stored content does not hash to it (not exported)"})
			continue
		}
		name := FilesDir + sha
		if err := dst.WriteAll(ctx, prefix+name, data, &blob.WriterOptions{ContentType: "application/octet-stream"}); err != nil {
			return fmt.Errorf("write %s: %w", prefix+name, err)
		}
		m.FileContents = append(m.FileContents, ContentFile{Name: name, SHA256: sha, Bytes: int64(len(data))})
	}
	return nil
}

// fileRef is what an event says of the content of a file (session.FileFetched,
// session.FileUpload).
type fileRef struct {
	SHA256 string `json:"sha256"`
	Status string `json:"status"`
}

// collectFileRef adds the sha256 of the content a file_fetched (stored) or file_upload
// payload references to refs, and those of the images a tool_result carries.
func collectFileRef(refs map[string]bool, typ, payload []byte) {
	if payload != nil && string(typ) == string(session.TypeToolResult) && bytes.Contains(payload, []byte(`"images"`)) {
		var tr struct {
			Images []fileRef `json:"images"`
		}
		if json.Unmarshal(payload, &tr) == nil {
			for _, im := range tr.Images {
				if session.ValidFileHash(im.SHA256) {
					refs[im.SHA256] = true
				}
			}
		}
		return
	}
	if payload == nil || (string(typ) != string(session.TypeFileFetched) && string(typ) != string(session.TypeFileUpload)) {
		return
	}
	var r fileRef
	if json.Unmarshal(payload, &r) != nil || !session.ValidFileHash(r.SHA256) {
		return
	}
	if string(typ) == string(session.TypeFileFetched) && r.Status != session.FileStored {
		return
	}
	refs[r.SHA256] = true
}

func (x *Exporter) writeEvents(ctx context.Context, tx pgx.Tx, q Query, dst *blob.Bucket,
	key string, m *Manifest, sessions map[string]int64, refs map[string]bool) (*objectWriter, File, error) {
	ct := "application/x-ndjson"
	if q.Format == CSV {
		ct = "text/csv"
	}
	o, err := newObjectWriter(ctx, dst, key, ct, x.opts.SpoolDir)
	if err != nil {
		return nil, File{}, err
	}
	if q.Format == CSV {
		if err := o.writeLine([]byte(strings.Join(append(eventColumns[:11:11], append([]string{"purged"}, eventColumns[11:]...)...), ",") + "\n")); err != nil {
			o.abort()
			return nil, File{}, err
		}
	}
	actor := make([]byte, 0, 64)
	err = session.ScanEventText(ctx, tx, q.filter(), func(v [][]byte) error {
		if len(v) != len(eventColumns) {
			return fmt.Errorf("read events: %d columns, want %d", len(v), len(eventColumns))
		}
		if q.Format == CSV {
			o.line = appendEventCSV(o.line[:0], v)
		} else {
			o.line = appendEventJSON(o.line[:0], v)
		}
		if err := o.writeLine(o.line); err != nil {
			return fmt.Errorf("write %s: %w", key, err)
		}
		o.records++
		count(m.Counts.ByType, v[6])
		actor = append(append(append(actor[:0], v[7]...), ':'), v[8]...)
		count(m.Counts.ByActor, actor)
		count(sessions, v[1])
		if refs != nil {
			collectFileRef(refs, v[6], v[10])
		}
		if m.FirstEventID == "" {
			m.FirstEventID, m.FirstPosition = string(v[5]), atoi(v[0])
		}
		m.lastEventID, m.lastPosition = append(m.lastEventID[:0], v[5]...), append(m.lastPosition[:0], v[0]...)
		return nil
	})
	if err != nil {
		o.abort()
		return nil, File{}, err
	}
	if m.lastEventID != nil {
		m.LastEventID, m.LastPosition = string(m.lastEventID), atoi(m.lastPosition)
	}
	m.Counts.Events = o.records
	f, err := o.close(key)
	if err != nil {
		return nil, File{}, err
	}
	return o, f, nil
}

// count increments m[string(k)] without allocating for keys already present.
func count(m map[string]int64, k []byte) {
	if _, ok := m[string(k)]; ok {
		m[string(k)]++
		return
	}
	m[string(k)] = 1
}

func atoi(b []byte) int64 {
	n, _ := strconv.ParseInt(string(b), 10, 64)
	return n
}

var (
	jsonKeys = [...]string{`{"position":`, `,"session_id":`, `,"channel_id":`, `,"thread_ts":`, `,"seq":`,
		`,"event_id":`, `,"type":`, `,"actor_kind":`, `,"actor_id":`, `,"created_at":`, `,"payload":`,
		`,"payload_hash":`, `,"prev_hash":`, `,"hash":`, `,"idempotency_key":`, `,"sanitized":`}
)

// appendEventJSON renders one event row (text values in eventColumns order) as a JSON line.
// The payload is embedded as the JSON text PostgreSQL stores (whose sha256 is payload_hash);
// a purged payload is null with "purged":true.
func appendEventJSON(b []byte, v [][]byte) []byte {
	for i, val := range v {
		b = append(b, jsonKeys[i]...)
		switch i {
		case 0, 4: // position, seq: integers
			b = append(b, val...)
		case 10: // payload
			if val == nil {
				b = append(b, "null"...)
			} else {
				b = append(b, val...)
			}
		case 14: // idempotency key: nullable
			if val == nil {
				b = append(b, "null"...)
			} else {
				b = appendJSONString(b, val)
			}
		case 15: // sanitized: t/f
			b = append(b, boolText(val)...)
		default:
			b = appendJSONString(b, val)
		}
		if i == 10 {
			b = append(b, `,"purged":`...)
			b = append(b, strconv.FormatBool(val == nil)...)
		}
	}
	return append(b, "}\n"...)
}

func boolText(v []byte) string {
	if len(v) > 0 && v[0] == 't' {
		return "true"
	}
	return "false"
}

// appendEventCSV renders one event row as a CSV record. The payload column holds the exact
// text whose sha256 is payload_hash (empty when purged).
func appendEventCSV(b []byte, v [][]byte) []byte {
	for i, val := range v {
		if i > 0 {
			b = append(b, ',')
		}
		switch i {
		case 15:
			b = append(b, boolText(val)...)
		default:
			b = appendCSVField(b, val)
		}
		if i == 10 {
			b = append(b, ',')
			b = append(b, strconv.FormatBool(val == nil)...)
		}
	}
	return append(b, '\n')
}

// recordColumn is one column of a record file (access.*, web_access.*): its name and how its
// text value is written in JSON.
type recordColumn struct {
	name string
	kind byte // 's' string, 'n' number, 'b' boolean (t/f), 'j' JSON text; NULL is null
}

var (
	accessRecordColumns = []recordColumn{{"id", 's'}, {"at", 's'}, {"who", 's'}, {"who_kind", 's'},
		{"who_source", 's'}, {"db_user", 's'}, {"action", 's'}, {"filters", 'j'}}
	// The web pages' access_log (bot/web, migrations/00002_search.sql): page views, searches
	// and downloads by person.
	webAccessRecordColumns = []recordColumn{{"id", 'n'}, {"at", 's'}, {"who", 's'}, {"via", 's'},
		{"auditor", 'b'}, {"action", 's'}, {"session_id", 's'}, {"format", 's'}, {"query", 's'},
		{"results", 'n'}, {"status", 'n'}, {"remote_addr", 's'}, {"user_agent", 's'}}
)

const sqlWebAccessInWindow = `
SELECT id, to_char(at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'), who, via, auditor, action,
       session_id, format, query, results, status, remote_addr, user_agent
FROM access_log WHERE at >= $1 AND at < $2 ORDER BY id`

func writeAccess(ctx context.Context, tx pgx.Tx, q Query, dst *blob.Bucket, key, spool string) (*objectWriter, File, error) {
	return writeRecords(ctx, tx, q, dst, key, spool, "access records", sqlAccessInWindow, accessRecordColumns)
}

func writeWebAccess(ctx context.Context, tx pgx.Tx, q Query, dst *blob.Bucket, key, spool string) (*objectWriter, File, error) {
	return writeRecords(ctx, tx, q, dst, key, spool, "web access records", sqlWebAccessInWindow, webAccessRecordColumns)
}

// writeRecords writes the rows of query (over the window) as one record file.
func writeRecords(ctx context.Context, tx pgx.Tx, q Query, dst *blob.Bucket, key, spool, what, query string,
	cols []recordColumn, args ...any) (*objectWriter, File, error) {
	ct := "application/x-ndjson"
	if q.Format == CSV {
		ct = "text/csv"
	}
	o, err := newObjectWriter(ctx, dst, key, ct, spool)
	if err != nil {
		return nil, File{}, err
	}
	if q.Format == CSV {
		names := make([]string, len(cols))
		for i, c := range cols {
			names[i] = c.name
		}
		if err := o.writeLine([]byte(strings.Join(names, ",") + "\n")); err != nil {
			o.abort()
			return nil, File{}, err
		}
	}
	rows, err := tx.Query(ctx, query, append([]any{pgx.QueryResultFormats{pgx.TextFormatCode}, q.From.UTC(), q.To.UTC()}, args...)...)
	if err != nil {
		o.abort()
		return nil, File{}, fmt.Errorf("read %s: %w", what, err)
	}
	defer rows.Close()
	for rows.Next() {
		v := rows.RawValues()
		if len(v) != len(cols) {
			o.abort()
			return nil, File{}, fmt.Errorf("read %s: %d columns, want %d", what, len(v), len(cols))
		}
		b := o.line[:0]
		if q.Format == CSV {
			for i, val := range v {
				if i > 0 {
					b = append(b, ',')
				}
				if cols[i].kind == 'b' {
					b = append(b, boolText(val)...)
				} else {
					b = appendCSVField(b, val)
				}
			}
			b = append(b, '\n')
		} else {
			for i, val := range v {
				if i == 0 {
					b = append(b, '{')
				} else {
					b = append(b, ',')
				}
				b = appendJSONString(b, []byte(cols[i].name))
				b = append(b, ':')
				switch {
				case val == nil:
					b = append(b, "null"...)
				case cols[i].kind == 'j' || cols[i].kind == 'n':
					b = append(b, val...)
				case cols[i].kind == 'b':
					b = append(b, boolText(val)...)
				default:
					b = appendJSONString(b, val)
				}
			}
			b = append(b, "}\n"...)
		}
		o.line = b
		if err := o.writeLine(b); err != nil {
			o.abort()
			return nil, File{}, fmt.Errorf("write %s: %w", key, err)
		}
		o.records++
	}
	if err := rows.Err(); err != nil {
		o.abort()
		return nil, File{}, fmt.Errorf("read %s: %w", what, err)
	}
	f, err := o.close(key)
	if err != nil {
		return nil, File{}, err
	}
	return o, f, nil
}
