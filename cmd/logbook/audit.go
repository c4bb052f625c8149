package main

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/user"
	"runtime/debug"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"
	"github.com/spf13/cobra"

	"github.com/logbook/logbook/audit"
	"github.com/logbook/logbook/session"
	"github.com/logbook/logbook/session/filestore"
)

func auditDSN(ctx context.Context, e env) (string, error) {
	// Audit holds a session advisory lock, SETs ROLE and sets startup parameters: never
	// through a transaction pooler, so the direct URL comes before DATABASE_URL.
	for _, k := range []string{"LOGBOOK_AUDIT_DATABASE_URL", "LOGBOOK_DIRECT_DATABASE_URL"} {
		if u := strings.TrimSpace(e.getenv(k)); u != "" {
			return u, nil
		}
	}
	u, err := cliDatabaseURL(ctx, e)
	if err != nil {
		return "", fmt.Errorf("%w (or LOGBOOK_AUDIT_DATABASE_URL for a separate auditor connection)", err)
	}
	return u, nil
}

func auditRole(e env) string {
	switch r := strings.TrimSpace(e.getenv("LOGBOOK_AUDIT_ROLE")); r {
	case "":
		return "logbook_auditor"
	case "none":
		return ""
	default:
		return r
	}
}

// openAudit opens the auditor's pool and the log's store over it, once the schema is known
// to be migrated (checkMigrated): audit reads the log through the store and writes its own
// tables (access records, runs, holds) through the pool. Close the pool when done.
func openAudit(ctx context.Context, e env) (*session.Store, *pgxpool.Pool, error) {
	dsn, err := auditDSN(ctx, e)
	if err != nil {
		return nil, nil, err
	}
	pool, err := session.Connect(ctx, dsn, session.PoolOptions{Role: auditRole(e), MaxConns: auditPoolSize, Name: "audit"})
	if err != nil {
		return nil, nil, fmt.Errorf("auditor connection: %w", err)
	}
	store := session.NewStore(pool, session.Options{})
	if err := checkMigrated(ctx, store); err != nil {
		pool.Close()
		return nil, nil, err
	}
	return store, pool, nil
}

// openAuditStandby opens LOGBOOK_READ_DATABASE_URL, a streaming standby of primary's server,
// as the auditor (nil when unset): exports and verify read it once it has caught up. The
// pool is opened lazily: a standby that is down is read around, not a failure.
func openAuditStandby(ctx context.Context, e env, primary *pgxpool.Pool) (*session.Standby, func(), error) {
	dsn := strings.TrimSpace(e.getenv("LOGBOOK_READ_DATABASE_URL"))
	if dsn == "" {
		return nil, func() {}, nil
	}
	maxWait, err := envDuration(e, "LOGBOOK_READ_MAX_WAIT")
	if err != nil {
		return nil, nil, err
	}
	pool, err := session.Connect(ctx, dsn, session.PoolOptions{Role: auditRole(e), MaxConns: 4, Lazy: true, ConnectTimeout: 2 * time.Second})
	if err != nil {
		return nil, nil, fmt.Errorf("LOGBOOK_READ_DATABASE_URL: %w", err)
	}
	return session.NewStandby(primary, pool, session.StandbyOptions{MaxWait: maxWait, Observer: cliStandbyObserver{e}}), pool.Close, nil
}

// accessRecord is what an audit command records before it acts (audit.RecordAccess).
type accessRecord struct {
	who     audit.Who
	action  string
	filters map[string]any
}

// withAudit is every audit command's preamble and close: it opens the auditor's connection
// (openAudit), records rec when there is one — before the action, so an action that fails
// later is still on record — runs fn, and closes the connection. Commands whose audit call
// records its own access (hold add, hold remove) or that only read audit's records pass nil.
func withAudit(ctx context.Context, e env, rec *accessRecord, fn func(store *session.Store, pool *pgxpool.Pool) error) error {
	store, pool, err := openAudit(ctx, e)
	if err != nil {
		return err
	}
	defer pool.Close()
	if rec != nil {
		if _, err := audit.RecordAccess(ctx, pool, rec.who, rec.action, rec.filters); err != nil {
			return err
		}
	}
	return fn(store, pool)
}

// openRetentionPool opens the connection of purges (role logbook_retention), once the schema
// is known to be migrated.
func openRetentionPool(ctx context.Context, e env) (*pgxpool.Pool, error) {
	dsn := strings.TrimSpace(e.getenv("LOGBOOK_RETENTION_DATABASE_URL"))
	if dsn == "" {
		var err error
		if dsn, err = auditDSN(ctx, e); err != nil {
			return nil, err
		}
	}
	pool, err := session.Connect(ctx, dsn, session.PoolOptions{Role: "logbook_retention", MaxConns: retentionPoolSize, Name: "retention"})
	if err != nil {
		return nil, fmt.Errorf("retention connection (its login must be a member of logbook_retention): %w", err)
	}
	if err := checkMigrated(ctx, session.NewStore(pool, session.Options{})); err != nil {
		pool.Close()
		return nil, err
	}
	return pool, nil
}

// operator is the person acting, for access records: --as, else LOGBOOK_AUDIT_OPERATOR, else
// USER, else the operating system account (containers and cron jobs often have no USER).
// Who.Source records which of them named the person.
func operator(e env, flag string) (audit.Who, error) {
	if name := strings.TrimSpace(flag); name != "" {
		return audit.Who{Name: name, Source: "--as"}, nil
	}
	for _, k := range []string{"LOGBOOK_AUDIT_OPERATOR", "USER"} {
		if name := strings.TrimSpace(e.getenv(k)); name != "" {
			return audit.Who{Name: name, Source: k}, nil
		}
	}
	account := e.account
	if account == nil {
		account = osAccount
	}
	name, err := account()
	if err != nil || strings.TrimSpace(name) == "" {
		return audit.Who{}, usageError{fmt.Errorf("say who is acting: --as, LOGBOOK_AUDIT_OPERATOR or USER (the OS account is unknown: %v)", err)}
	}
	return audit.Who{Name: strings.TrimSpace(name), Source: "os-account"}, nil
}

// osAccount is the login name of the process's user, or "uid:<n>" when the user database
// does not know the uid (a container run with an arbitrary uid).
func osAccount() (string, error) {
	u, err := user.Current()
	if err == nil && u.Username != "" {
		return u.Username, nil
	}
	if uid := os.Getuid(); uid >= 0 {
		return "uid:" + strconv.Itoa(uid), nil
	}
	return "", fmt.Errorf("look up the current user: %w", err)
}

func signingKey(e env, flag string) (ed25519.PrivateKey, error) {
	path := flag
	if path == "" {
		path = e.getenv("LOGBOOK_AUDIT_SIGNING_KEY")
	}
	if path == "" {
		return nil, nil
	}
	return audit.ReadPrivateKeyFile(path)
}

func publicKey(e env, flag string) (ed25519.PublicKey, error) {
	path := flag
	if path == "" {
		path = e.getenv("LOGBOOK_AUDIT_PUBLIC_KEY")
	}
	if path == "" {
		return nil, nil
	}
	return audit.ReadPublicKeyFile(path)
}

func auditZone(e env, flag string) (*time.Location, error) {
	name := flag
	if name == "" {
		name = e.getenv("LOGBOOK_AUDIT_TZ")
	}
	if name == "" {
		return time.UTC, nil
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		return nil, usageError{fmt.Errorf("time zone %q: %w", name, err)}
	}
	return loc, nil
}

// parseAuditTime accepts RFC 3339 (with an offset) or a date or date-time without one, read
// in loc.
func parseAuditTime(s string, loc *time.Location) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	for _, layout := range []string{"2006-01-02", "2006-01-02T15:04", "2006-01-02T15:04:05", "2006-01-02 15:04", "2006-01-02 15:04:05"} {
		if t, err := time.ParseInLocation(layout, s, loc); err == nil {
			return t, nil
		}
	}
	return time.Time{}, usageError{fmt.Errorf("time %q: use RFC 3339 (2025-03-09T02:00:00-08:00) or a date (2025-03-09)", s)}
}

func generatorVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" {
				return "devel+" + s.Value
			}
		}
	}
	return "devel"
}

func tampered(err error) error {
	if errors.Is(err, audit.ErrTampered) {
		return exitError{code: 1, err: err}
	}
	return err
}

func newAuditCmd(e env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "audit",
		Short: "Export, verify, retain and hold the log (LOGBOOK_AUDIT_DATABASE_URL or DATABASE_URL)",
		Long: `Audit-grade access to the session log.

Commands connect with LOGBOOK_AUDIT_DATABASE_URL (falling back to DATABASE_URL) as the role
logbook_auditor (LOGBOOK_AUDIT_ROLE=none keeps the login's own role; rebuild-projections
rewrites as the login itself). Every export, verification, rebuild and hold change is recorded, append-only, with who (--as,
LOGBOOK_AUDIT_OPERATOR, USER, or else the OS account), which of those named them
(who_source), and which filters; those records appear in exports.

Destinations are a directory or a URL: file:///path is built in; s3://, gs:// and
azblob:// need the matching gocloud.dev/blob driver compiled in.

` + settingsHelp("audit"),
	}
	cmd.AddCommand(newAuditExportCmd(e), newAuditKeygenCmd(e), newAuditVerifyExportCmd(e), newAuditVerifyCmd(e),
		newAuditRebuildProjectionsCmd(e), newAuditCheckpointCmd(e), newAuditScheduleCmd(e), newAuditHoldCmd(e), newAuditPurgeCmd(e),
		newAuditRunsCmd(e), newAuditTailCmd(e))
	return cmd
}

// openFiles opens the store of shared files' content over log (LOGBOOK_BLOB_URL: a bucket;
// unset: the database). The caller closes it.
func openFiles(ctx context.Context, e env, log filestore.Log) (*filestore.Store, error) {
	return filestore.Open(ctx, log, strings.TrimSpace(e.getenv("LOGBOOK_BLOB_URL")))
}

// retentionBucket opens the bucket of shared files' content when LOGBOOK_BLOB_URL names one,
// for retention to delete what its purges left unreferenced there (Retention.WithFiles); nil
// when there is none: content in the database goes with the purge itself. The caller closes
// it.
func retentionBucket(ctx context.Context, e env, pool *pgxpool.Pool) (*filestore.Store, error) {
	if strings.TrimSpace(e.getenv("LOGBOOK_BLOB_URL")) == "" {
		return nil, nil
	}
	return openFiles(ctx, e, session.NewStore(pool, session.Options{}))
}

// exportFlags are the flags of audit export.
type exportFlags struct {
	actors                                            []string
	from, to, channel, format, out, zone, keyPath, as string
	withFiles, overwrite                              bool
}

func newAuditExportCmd(e env) *cobra.Command {
	var f exportFlags
	cmd := &cobra.Command{
		Use:   "export --from <time> --to <time> --out <dir or URL> [--actor <id>]... [--channel <id>] [--format jsonl|csv] [--overwrite]",
		Short: "Export the events of a half-open time window [from, to), by actor or all",
		Long: `Export the events of a half-open time window [from, to), the access records of the window and
a manifest listing every file with its sha256 (signed with --sign-key).

--out must be an empty directory or bucket prefix: an export never mixes with what is there.
--overwrite replaces an earlier export there: its files are deleted, manifest first, once the
new export has been read, and only files an export writes are ever deleted (anything else
there is refused). If the process dies midway, what is left has no manifest and fails
verify-export; run the export again with --overwrite.`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			ctx := c.Context()
			q, rec, key, err := f.request(e)
			if err != nil {
				return err
			}
			bucket, err := audit.OpenBucket(ctx, f.out)
			if err != nil {
				return err
			}
			defer bucket.Close()
			// Refused before anything is recorded or read.
			if err := audit.CheckEmpty(ctx, bucket, "", f.overwrite); err != nil {
				return fmt.Errorf("export to %s: %w; give --overwrite to replace an earlier export there, or another --out", redactURL(f.out), err)
			}
			return withAudit(ctx, e, &rec, func(store *session.Store, pool *pgxpool.Pool) error {
				sb, closeStandby, err := openAuditStandby(ctx, e, pool)
				if err != nil {
					return err
				}
				defer closeStandby()
				opts := audit.ExporterOptions{Version: generatorVersion(), SigningKey: key, Overwrite: f.overwrite, Standby: sb}
				if f.withFiles {
					fs, err := openFiles(ctx, e, store)
					if err != nil {
						return err
					}
					defer fs.Close()
					opts.Files = fs
				}
				m, err := audit.NewExporter(store, pool, opts).Export(ctx, q, bucket, "")
				if err != nil {
					return err
				}
				return reportExport(e, m, f.out)
			})
		},
	}
	fl := cmd.Flags()
	fl.StringArrayVar(&f.actors, "actor", nil, "actor id (Slack user id, bot id or system part); repeat; default all")
	fl.StringVar(&f.from, "from", "", "window start, inclusive: RFC 3339 or a date")
	fl.StringVar(&f.to, "to", "", "window end, exclusive: RFC 3339 or a date")
	fl.StringVar(&f.channel, "channel", "", "only this Slack channel id")
	fl.StringVar(&f.format, "format", "jsonl", "jsonl or csv")
	fl.StringVar(&f.out, "out", "", "destination: an empty directory or bucket URL (file:///..., s3://...)")
	fl.BoolVar(&f.overwrite, "overwrite", false, "replace an earlier export at --out (only an export's files are deleted)")
	fl.StringVar(&f.zone, "tz", "", "zone of --from/--to without an offset (default LOGBOOK_AUDIT_TZ or UTC)")
	fl.StringVar(&f.keyPath, "sign-key", "", "ed25519 private key (PEM) to sign the manifest (default LOGBOOK_AUDIT_SIGNING_KEY)")
	fl.StringVar(&f.as, "as", "", "who is exporting (default LOGBOOK_AUDIT_OPERATOR, USER, then the OS account)")
	fl.BoolVar(&f.withFiles, "with-files", false, "also export the content of the files the events reference, as files/<sha256> (LOGBOOK_BLOB_URL when kept in a bucket)")
	return cmd
}

// request reads export's flags: the query, its access record and the signing key.
func (f exportFlags) request(e env) (audit.Query, accessRecord, ed25519.PrivateKey, error) {
	loc, err := auditZone(e, f.zone)
	if err != nil {
		return audit.Query{}, accessRecord{}, nil, err
	}
	if f.from == "" || f.to == "" || f.out == "" {
		return audit.Query{}, accessRecord{}, nil, usageError{errors.New("--from, --to and --out are required")}
	}
	q := audit.Query{Actors: f.actors, Channel: f.channel, Zone: loc.String()}
	if q.From, err = parseAuditTime(f.from, loc); err != nil {
		return audit.Query{}, accessRecord{}, nil, err
	}
	if q.To, err = parseAuditTime(f.to, loc); err != nil {
		return audit.Query{}, accessRecord{}, nil, err
	}
	if !q.To.After(q.From) {
		return audit.Query{}, accessRecord{}, nil, usageError{fmt.Errorf("--to %s is not after --from %s: the window [from, to) would be empty", f.to, f.from)}
	}
	if q.Format, err = audit.ParseFormat(f.format); err != nil {
		return audit.Query{}, accessRecord{}, nil, usageError{fmt.Errorf("--format: %w", err)}
	}
	who, err := operator(e, f.as)
	if err != nil {
		return audit.Query{}, accessRecord{}, nil, err
	}
	key, err := signingKey(e, f.keyPath)
	if err != nil {
		return audit.Query{}, accessRecord{}, nil, err
	}
	filters := q.Filters()
	filters["destination"] = redactURL(f.out)
	if f.withFiles {
		filters["with_files"] = true
	}
	if f.overwrite {
		filters["overwrite"] = true
	}
	return q, accessRecord{who: who, action: "export", filters: filters}, key, nil
}

// reportExport prints what an export wrote, and fails (exit 1) when an exported chain is
// broken or a file's stored content does not match its hash.
func reportExport(e env, m audit.Manifest, out string) error {
	broken := 0
	for _, s := range m.Sessions {
		if !s.ChainOK {
			broken++
		}
	}
	fmt.Fprintf(e.stdout, "exported %d events of %d sessions (%d access records) to %s\n",
		m.Counts.Events, len(m.Sessions), m.AccessRecords, redactURL(out))
	for _, f := range m.Files {
		fmt.Fprintf(e.stdout, "  %s  %s  %d bytes\n", f.SHA256, f.Name, f.Bytes)
	}
	mismatched := 0
	if m.WithFiles {
		var n int64
		for _, f := range m.FileContents {
			n += f.Bytes
		}
		fmt.Fprintf(e.stdout, "%d files' content (%d bytes) under %s\n", len(m.FileContents), n, audit.FilesDir)
		for _, f := range m.MissingFiles {
			fmt.Fprintf(e.stderr, "logbook: file %s is not in the export: %s\n", f.SHA256, f.Reason)
			if f.Mismatch {
				mismatched++
			}
		}
	}
	if m.SigningKey != "" {
		fmt.Fprintf(e.stdout, "manifest signed by key %s\n", m.SigningKey)
	}
	if !m.WindowClosed {
		fmt.Fprintf(e.stderr, "logbook: warning: the window ends after %s (now): later events may still fall in it\n",
			m.AsOf.Format(time.RFC3339))
	}
	if broken > 0 {
		return exitError{code: 1, err: fmt.Errorf("%w: %d exported sessions have a broken chain (see manifest.json)", audit.ErrTampered, broken)}
	}
	if mismatched > 0 {
		return exitError{code: 1, err: fmt.Errorf("%w: the stored content of %d files does not match its hash (see missing_files in manifest.json)", audit.ErrTampered, mismatched)}
	}
	return nil
}

// newAuditKeygenCmd is `logbook audit keygen` (every subcommand has cobra's Use/Short/Args/RunE shape; what it runs is its own).
func newAuditKeygenCmd(e env) *cobra.Command {
	var out string
	cmd := &cobra.Command{
		Use:   "keygen [--out <prefix>]",
		Short: "Make an ed25519 key pair: <prefix>.key (private, mode 0600) and <prefix>.pub",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			priv, pub, err := audit.GenerateKey()
			if err != nil {
				return err
			}
			kf, err := os.OpenFile(out+".key", os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
			if err != nil {
				return fmt.Errorf("write private key: %w", err)
			}
			if _, err := kf.Write(priv); err != nil {
				kf.Close()
				return fmt.Errorf("write private key: %w", err)
			}
			if err := kf.Close(); err != nil {
				return fmt.Errorf("write private key: %w", err)
			}
			if err := os.WriteFile(out+".pub", pub, 0o644); err != nil {
				return fmt.Errorf("write public key: %w", err)
			}
			pk, err := audit.ParsePublicKey(pub)
			if err != nil {
				return err
			}
			fmt.Fprintf(e.stdout, "wrote %s.key (keep it secret; LOGBOOK_AUDIT_SIGNING_KEY) and %s.pub (LOGBOOK_AUDIT_PUBLIC_KEY)\nkey %s\n",
				out, out, audit.KeyFingerprint(pk))
			return nil
		},
	}
	cmd.Flags().StringVar(&out, "out", "logbook-audit", "path prefix of the key files")
	return cmd
}

func newAuditVerifyExportCmd(e env) *cobra.Command {
	var pubPath string
	cmd := &cobra.Command{
		Use:   "verify-export <dir or URL>",
		Short: "Check an export's files against its manifest, and the manifest against its signature",
		Args:  cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			ctx := c.Context()
			pub, err := publicKey(e, pubPath)
			if err != nil {
				return err
			}
			if u, err := url.Parse(args[0]); err != nil || len(u.Scheme) <= 1 {
				if _, err := os.Stat(args[0]); err != nil {
					return fmt.Errorf("verify export: %w", err) // not created, as a destination would be
				}
			}
			bucket, err := audit.OpenBucket(ctx, args[0])
			if err != nil {
				return err
			}
			defer bucket.Close()
			check, err := audit.VerifyExport(ctx, bucket, "", pub)
			if errors.Is(err, audit.ErrNotFound) {
				return exitError{code: 1, err: fmt.Errorf("%s holds no export: %w", redactURL(args[0]), err)}
			}
			if err != nil {
				return tampered(err)
			}
			m := check.Manifest
			sig := "unsigned: only the files listed in the manifest are protected"
			if check.SignatureValid {
				sig = "signature valid (key " + m.SigningKey + ")"
			}
			fmt.Fprintf(e.stdout, "OK: %d files match the manifest; %d events %s..%s; %s\n",
				len(m.Files), m.Counts.Events, m.Query.From.Format(time.RFC3339), m.Query.To.Format(time.RFC3339), sig)
			return nil
		},
	}
	cmd.Flags().StringVar(&pubPath, "public-key", "", "ed25519 public key (PEM) that signed it (default LOGBOOK_AUDIT_PUBLIC_KEY)")
	return cmd
}

func newAuditVerifyCmd(e env) *cobra.Command {
	var sessionID, since, against, pubPath, zone, as string
	cmd := &cobra.Command{
		Use:   "verify [--session <id>] [--since <time>] [--against <checkpoint>]",
		Short: "Recompute hash chains and seq density; exit 1 naming the first broken session and seq",
		Long: `Recompute every session's hash chain (or one session's, or those with events since a
time) and check that seqs are dense. With --against, also compare with a checkpoint kept
outside the database (written by scheduled exports or 'logbook audit checkpoint'), which
detects a chain that was rewritten consistently by someone who disabled the triggers.`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			ctx := c.Context()
			opts, filters, err := verifyOptions(e, sessionID, since, zone)
			if err != nil {
				return err
			}
			rec := accessRecord{action: "verify", filters: filters}
			if rec.who, err = operator(e, as); err != nil {
				return err
			}
			var cp *audit.Checkpoint
			if against != "" {
				if cp, err = readCheckpointAt(ctx, e, against, pubPath); err != nil {
					return err
				}
				rec.action, filters["against"] = "verify-checkpoint", redactURL(against)
			}
			return withAudit(ctx, e, &rec, func(store *session.Store, pool *pgxpool.Pool) error {
				sb, closeStandby, err := openAuditStandby(ctx, e, pool)
				if err != nil {
					return err
				}
				defer closeStandby()
				return verifyChains(ctx, e, sb, store, opts, cp)
			})
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&sessionID, "session", "", "only this session id")
	fl.StringVar(&since, "since", "", "only sessions with events at or after this time (RFC 3339 or a date)")
	fl.StringVar(&against, "against", "", "a checkpoint file or URL to compare heads with")
	fl.StringVar(&pubPath, "public-key", "", "public key that signed the checkpoint (default LOGBOOK_AUDIT_PUBLIC_KEY)")
	fl.StringVar(&zone, "tz", "", "zone of --since without an offset (default LOGBOOK_AUDIT_TZ or UTC)")
	fl.StringVar(&as, "as", "", "who is verifying (default LOGBOOK_AUDIT_OPERATOR, USER, then the OS account)")
	return cmd
}

func newAuditRebuildProjectionsCmd(e env) *cobra.Command {
	var channel, as string
	var dryRun bool
	cmd := &cobra.Command{
		Use:   "rebuild-projections [--channel <id>] [--dry-run]",
		Short: "Make the channel tables agree with the channels' ledgers again (a superuser's act)",
		Long: `Rebuild the projections of the channels' ledgers (every channel's, or --channel's):
channel_settings, channel_memory, channel_memory_forgotten, channel_repos, budget_raises,
schedules, schedule_removals, mcp_tokens (who connected and when) and automation_pauses.
Each ledger's chain is verified first; a ledger that does not verify is refused, named, and
nothing is rebuilt. Then, in one transaction, a row the table lost is inserted with its
original id, a row that differs from its ledger event is rewritten, and a row without a
ledger event is deleted (a connector connected behind the ledger's back goes, token and
all). What the ledger cannot give back is listed and exits 1: a connector whose row is gone
(its sealed token is never in the ledger; connect it again).

--dry-run lists what would change and writes nothing (read access is enough). A rebuild
rewrites append-only tables with their triggers off, so it runs as the login of
LOGBOOK_AUDIT_DATABASE_URL itself (not logbook_auditor), which must be a superuser. Both are
recorded in the audit access records, with who (--as, LOGBOOK_AUDIT_OPERATOR, USER).`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			ctx := c.Context()
			rec := accessRecord{action: "rebuild-projections", filters: map[string]any{"dry_run": dryRun}}
			if channel != "" {
				rec.filters["channel"] = channel
			}
			var err error
			if rec.who, err = operator(e, as); err != nil {
				return err
			}
			return withAudit(ctx, e, &rec, func(store *session.Store, _ *pgxpool.Pool) error {
				if !dryRun {
					dsn, err := auditDSN(ctx, e)
					if err != nil {
						return err
					}
					pool, err := session.Connect(ctx, dsn, session.PoolOptions{MaxConns: 2, Name: "rebuild"})
					if err != nil {
						return fmt.Errorf("rebuild connection: %w", err)
					}
					defer pool.Close()
					store = session.NewStore(pool, session.Options{})
				}
				r, err := store.RebuildProjections(ctx, channel, dryRun)
				if err != nil {
					var broken *session.BrokenLedgerError
					if errors.As(err, &broken) || errors.Is(err, session.ErrRebuildForbidden) {
						return exitError{code: 1, err: err}
					}
					return err
				}
				return reportRebuild(e, r)
			})
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&channel, "channel", "", "only this channel's ledger (a Slack channel id)")
	fl.BoolVar(&dryRun, "dry-run", false, "list what would change; write nothing")
	fl.StringVar(&as, "as", "", "who is rebuilding (default LOGBOOK_AUDIT_OPERATOR, USER, then the OS account)")
	return cmd
}

// reportRebuild prints what a rebuild found and did; what it could not rebuild exits 1.
func reportRebuild(e env, r session.Rebuild) error {
	verb := "REBUILT"
	if r.DryRun {
		verb = "WOULD REBUILD"
	}
	left := map[session.LedgerFinding]bool{}
	for _, f := range r.Unrebuilt {
		left[f] = true
	}
	for _, f := range r.Findings {
		if !left[f] {
			fmt.Fprintf(e.stdout, "%s: %s\n", verb, f)
		}
	}
	for _, f := range r.Unrebuilt {
		fmt.Fprintf(e.stdout, "NOT REBUILT: %s\n", f)
	}
	switch {
	case r.DryRun:
		fmt.Fprintf(e.stdout, "dry run: %d channel ledgers verified; %d projection rows disagree with them; nothing written\n", r.Ledgers, len(r.Findings))
	default:
		fmt.Fprintf(e.stdout, "%d channel ledgers verified; %d findings, %d projection rows rewritten\n", r.Ledgers, len(r.Findings), r.Rows)
	}
	if len(r.Unrebuilt) > 0 {
		return exitError{code: 1, err: fmt.Errorf("%d projection rows cannot be rebuilt from their ledgers", len(r.Unrebuilt))}
	}
	return nil
}

// verifyOptions reads verify's --session and --since, and the filters they record.
func verifyOptions(e env, sessionID, since, zone string) (audit.VerifyOptions, map[string]any, error) {
	var opts audit.VerifyOptions
	filters := map[string]any{}
	if sessionID != "" {
		id, err := session.ParseID(sessionID)
		if err != nil {
			return opts, nil, usageError{fmt.Errorf("--session %q is not a session id", sessionID)}
		}
		opts.Session = id
		filters["session"] = id
	}
	if since != "" {
		loc, err := auditZone(e, zone)
		if err != nil {
			return opts, nil, err
		}
		if opts.Since, err = parseAuditTime(since, loc); err != nil {
			return opts, nil, err
		}
		filters["since"] = opts.Since.UTC()
	}
	return opts, filters, nil
}

// readCheckpointAt reads the checkpoint at loc (a file or URL), checking its signature with
// the public key of pubPath or LOGBOOK_AUDIT_PUBLIC_KEY when there is one.
func readCheckpointAt(ctx context.Context, e env, loc, pubPath string) (*audit.Checkpoint, error) {
	pub, err := publicKey(e, pubPath)
	if err != nil {
		return nil, err
	}
	dir, key := audit.SplitObject(loc)
	bucket, err := audit.OpenBucket(ctx, dir)
	if err != nil {
		return nil, err
	}
	defer bucket.Close()
	cp, err := audit.ReadCheckpoint(ctx, bucket, key, pub)
	if err != nil {
		return nil, tampered(err)
	}
	return &cp, nil
}

// verifyChains verifies the chains (and, with cp, compares them with the checkpoint) and
// prints the findings; a finding fails with exit status 1. With a standby (sb; nil: none) the
// chains are read there once it has replayed what the primary had committed, else from
// store's primary.
func verifyChains(ctx context.Context, e env, sb *session.Standby, store *session.Store, opts audit.VerifyOptions, cp *audit.Checkpoint) error {
	var onStandby *session.Store
	if sb != nil {
		onStandby = session.NewStore(sb.StandbyPool(), session.Options{})
	}
	var r audit.Report
	err := session.ReadFrom(ctx, sb, session.ReadYourWrites, onStandby, store, func(st *session.Store) error {
		v := audit.NewVerifier(st)
		var err error
		if r, err = v.Verify(ctx, opts); err != nil {
			return err
		}
		if cp != nil {
			rc, err := v.VerifyAgainst(ctx, *cp)
			if err != nil {
				return err
			}
			r.Findings = mergeFindings(rc.Findings, r.Findings)
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, f := range r.Findings {
		fmt.Fprintln(e.stdout, "BROKEN:", f)
	}
	if err := r.Err(); err != nil {
		return exitError{code: 1, err: err}
	}
	msg := fmt.Sprintf("OK: %d sessions, %d events verified (%d purged by retention); %d channel ledgers match their projections", r.Sessions, r.Events, r.Purged, r.Ledgers)
	if cp != nil {
		msg += fmt.Sprintf("; %d sessions match the checkpoint of %s", len(cp.Heads), cp.TakenAt.Format(time.RFC3339))
	}
	fmt.Fprintln(e.stdout, msg)
	return nil
}

// mergeFindings lists checkpoint findings first, then chain findings of other sessions.
func mergeFindings(first, rest []audit.Finding) []audit.Finding {
	seen := map[session.ID]bool{}
	for _, f := range first {
		seen[f.Session] = true
	}
	for _, f := range rest {
		if !seen[f.Session] {
			first = append(first, f)
		}
	}
	return first
}

func newAuditCheckpointCmd(e env) *cobra.Command {
	var out, keyPath string
	cmd := &cobra.Command{
		Use:   "checkpoint --out <file or URL>",
		Short: "Write every session's head (seq, hash) to a file kept outside the database",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			ctx := c.Context()
			if out == "" {
				return usageError{errors.New("--out is required")}
			}
			key, err := signingKey(e, keyPath)
			if err != nil {
				return err
			}
			return withAudit(ctx, e, nil, func(store *session.Store, _ *pgxpool.Pool) error {
				cp, err := audit.NewVerifier(store).TakeCheckpoint(ctx)
				if err != nil {
					return err
				}
				dir, name := audit.SplitObject(out)
				bucket, err := audit.OpenBucket(ctx, dir)
				if err != nil {
					return err
				}
				defer bucket.Close()
				if err := audit.WriteCheckpoint(ctx, bucket, name, cp, key); err != nil {
					return err
				}
				fmt.Fprintf(e.stdout, "checkpoint of %d sessions at %s written to %s\n", len(cp.Heads), cp.TakenAt.Format(time.RFC3339), redactURL(out))
				return nil
			})
		},
	}
	cmd.Flags().StringVar(&out, "out", "", "checkpoint file or URL")
	cmd.Flags().StringVar(&keyPath, "sign-key", "", "ed25519 private key (PEM) (default LOGBOOK_AUDIT_SIGNING_KEY)")
	return cmd
}

// auditSchedule is the scheduled export's settings (LOGBOOK_AUDIT_SCHEDULE and the settings
// it needs), read and checked before anything is contacted.
type auditSchedule struct {
	spec     *audit.Spec
	dest     string
	format   audit.Format
	actors   []string
	perActor bool
	keep     time.Duration
	key      ed25519.PrivateKey
	name     string
	channel  string
}

// loadAuditSchedule reads the scheduled export's settings. It returns nil and no error when
// LOGBOOK_AUDIT_SCHEDULE is unset; every bad value is an error naming its variable.
func loadAuditSchedule(e env) (*auditSchedule, error) {
	spec := strings.TrimSpace(e.getenv("LOGBOOK_AUDIT_SCHEDULE"))
	if spec == "" {
		return nil, nil
	}
	loc, err := auditZone(e, "")
	if err != nil {
		return nil, fmt.Errorf("LOGBOOK_AUDIT_TZ: %w", err)
	}
	a := &auditSchedule{name: e.getenv("LOGBOOK_AUDIT_SCHEDULE_NAME"), channel: strings.TrimSpace(e.getenv("LOGBOOK_AUDIT_CHANNEL"))}
	if a.spec, err = audit.ParseSpec(spec, loc); err != nil {
		return nil, fmt.Errorf("LOGBOOK_AUDIT_SCHEDULE: %w", err)
	}
	if a.dest = strings.TrimSpace(e.getenv("LOGBOOK_AUDIT_DEST")); a.dest == "" {
		return nil, errors.New("LOGBOOK_AUDIT_SCHEDULE is set but LOGBOOK_AUDIT_DEST (a directory or bucket URL) is not")
	}
	if a.format, err = audit.ParseFormat(e.getenv("LOGBOOK_AUDIT_FORMAT")); err != nil {
		return nil, fmt.Errorf("LOGBOOK_AUDIT_FORMAT: %w", err)
	}
	for _, actor := range strings.Split(e.getenv("LOGBOOK_AUDIT_ACTORS"), ",") {
		if actor = strings.TrimSpace(actor); actor != "" {
			a.actors = append(a.actors, actor)
		}
	}
	if a.perActor, err = envBool(e, "LOGBOOK_AUDIT_PER_ACTOR", false); err != nil {
		return nil, err
	}
	if a.keep, err = audit.ParseRetention(e.getenv("LOGBOOK_RETENTION")); err != nil {
		return nil, fmt.Errorf("LOGBOOK_RETENTION: %w", err)
	}
	if a.key, err = signingKey(e, ""); err != nil {
		return nil, fmt.Errorf("LOGBOOK_AUDIT_SIGNING_KEY: %w", err)
	}
	return a, nil
}

// start connects what the scheduled export needs and returns its scheduler, for `logbook
// audit schedule` and `logbook serve`. closeAll releases its connections and destination
// after Run returns.
func (a *auditSchedule) start(ctx context.Context, e env, log zerolog.Logger) (s *audit.Scheduler, closeAll func(), err error) {
	var closers []func()
	closeAll = func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}
	defer func() {
		if err != nil {
			closeAll()
		}
	}()
	store, auditPool, err := openAudit(ctx, e)
	if err != nil {
		return nil, nil, err
	}
	closers = append(closers, auditPool.Close)
	bucket, err := audit.OpenBucket(ctx, a.dest)
	if err != nil {
		return nil, nil, err
	}
	closers = append(closers, func() { bucket.Close() })
	var ret *audit.Retention
	if a.keep > 0 {
		pool, err := openRetentionPool(ctx, e)
		if err != nil {
			return nil, nil, err
		}
		closers = append(closers, pool.Close)
		if ret, err = audit.NewRetention(pool, a.keep); err != nil {
			return nil, nil, err
		}
		fs, err := retentionBucket(ctx, e, pool)
		if err != nil {
			return nil, nil, err
		}
		if fs != nil {
			closers = append(closers, func() { fs.Close() })
			ret.WithFiles(fs)
		}
	}
	host, _ := os.Hostname()
	sb, closeStandby, err := openAuditStandby(ctx, e, auditPool)
	if err != nil {
		return nil, nil, err
	}
	closers = append(closers, closeStandby)
	exp := audit.NewExporter(store, auditPool, audit.ExporterOptions{Version: generatorVersion(), SigningKey: a.key, Standby: sb})
	s, err = audit.NewScheduler(auditPool, exp, audit.NewVerifier(store), audit.SchedulerConfig{
		Name: a.name, Spec: a.spec, Actors: a.actors, PerActor: a.perActor,
		Channel: a.channel, Format: a.format, Dest: bucket, SigningKey: a.key,
		Retention: ret, Node: host, Logger: log,
	})
	if err != nil {
		return nil, nil, err
	}
	return s, closeAll, nil
}

func newAuditScheduleCmd(e env) *cobra.Command {
	return &cobra.Command{
		Use:   "schedule",
		Short: "Run scheduled exports alone (LOGBOOK_AUDIT_SCHEDULE, LOGBOOK_AUDIT_DEST) until interrupted",
		Long: `Run the scheduled exports that 'logbook serve' also runs, without the bot.

Each run exports the window since the previous successful one (windows are half-open,
in UTC, cut at the schedule's fire times), writes a checkpoint of every session's head,
and applies LOGBOOK_RETENTION when set. Missed windows are caught up at start; several
replicas export each window once.`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			log := zerolog.New(e.stderr).Level(zerolog.InfoLevel).With().Timestamp().Logger()
			a, err := loadAuditSchedule(e)
			if err != nil {
				return usageError{err}
			}
			if a == nil {
				return usageError{errors.New("LOGBOOK_AUDIT_SCHEDULE is not set (e.g. \"CRON_TZ=UTC 0 2 * * *\")")}
			}
			s, closeAll, err := a.start(c.Context(), e, log)
			if err != nil {
				return err
			}
			defer closeAll()
			return s.Run(c.Context())
		},
	}
}

func newAuditHoldCmd(e env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "hold",
		Short: "Add, remove or list legal holds (retention purges nothing a hold covers)",
	}
	cmd.AddCommand(newAuditHoldAddCmd(e), newAuditHoldRemoveCmd(e), newAuditHoldListCmd(e))
	return cmd
}

func newAuditHoldAddCmd(e env) *cobra.Command {
	var sessionID, channel, actor, reason, as string
	cmd := &cobra.Command{
		Use:   "add (--session <id> | --channel <id> | --actor <id>) --reason <text>",
		Short: "Open a legal hold on a session, a channel or an actor the log has",
		Long: `Open a legal hold: retention purges nothing it covers. It names something the log has —
a session, a channel some session is in, or an actor of some event — or fails naming what
was not found, so a typo never holds nothing.`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			var scope audit.HoldScope
			var value string
			n := 0
			for _, s := range []struct {
				v     string
				scope audit.HoldScope
			}{{sessionID, audit.HoldSession}, {channel, audit.HoldChannel}, {actor, audit.HoldActor}} {
				if s.v != "" {
					n++
					scope, value = s.scope, s.v
				}
			}
			if n != 1 || strings.TrimSpace(reason) == "" {
				return usageError{errors.New("give exactly one of --session, --channel, --actor, and --reason")}
			}
			if _, err := session.ParseID(value); scope == audit.HoldSession && err != nil {
				return usageError{fmt.Errorf("--session %q is not a session id", value)}
			}
			who, err := operator(e, as)
			if err != nil {
				return err
			}
			return withAudit(c.Context(), e, nil, func(_ *session.Store, pool *pgxpool.Pool) error {
				h, err := audit.AddHold(c.Context(), pool, who, scope, value, reason)
				if err != nil {
					return err
				}
				fmt.Fprintf(e.stdout, "hold %s on %s %s\n", h.ID, h.Scope, h.Value)
				return nil
			})
		},
	}
	cmd.Flags().StringVar(&sessionID, "session", "", "a session id")
	cmd.Flags().StringVar(&channel, "channel", "", "a Slack channel id: every session of the channel")
	cmd.Flags().StringVar(&actor, "actor", "", "an actor id: every session the actor took part in")
	cmd.Flags().StringVar(&reason, "reason", "", "why (required; recorded)")
	cmd.Flags().StringVar(&as, "as", "", "who (default LOGBOOK_AUDIT_OPERATOR, USER, then the OS account)")
	return cmd
}

func newAuditHoldRemoveCmd(e env) *cobra.Command {
	var reason, as string
	cmd := &cobra.Command{
		Use:   "remove <hold id> --reason <text>",
		Short: "End a legal hold",
		Args:  cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			id, err := uuid.Parse(args[0])
			if err != nil {
				return usageError{fmt.Errorf("%q is not a hold id (logbook audit hold list shows them)", args[0])}
			}
			if strings.TrimSpace(reason) == "" {
				return usageError{errors.New("--reason is required")}
			}
			who, err := operator(e, as)
			if err != nil {
				return err
			}
			return withAudit(c.Context(), e, nil, func(_ *session.Store, pool *pgxpool.Pool) error {
				if err := audit.RemoveHold(c.Context(), pool, who, id, reason); err != nil {
					return err
				}
				fmt.Fprintf(e.stdout, "hold %s removed\n", id)
				return nil
			})
		},
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why (required; recorded)")
	cmd.Flags().StringVar(&as, "as", "", "who (default LOGBOOK_AUDIT_OPERATOR, USER, then the OS account)")
	return cmd
}

func newAuditHoldListCmd(e env) *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List open legal holds",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			return withAudit(c.Context(), e, nil, func(_ *session.Store, pool *pgxpool.Pool) error {
				hs, err := audit.Holds(c.Context(), pool)
				if err != nil {
					return err
				}
				tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "HOLD\tSCOPE\tVALUE\tSINCE\tBY\tREASON")
				for _, h := range hs {
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", h.ID, h.Scope, h.Value, h.At.UTC().Format(time.RFC3339), h.Who, h.Reason)
				}
				return tw.Flush()
			})
		},
	}
}

func newAuditPurgeCmd(e env) *cobra.Command {
	var olderThan, as string
	cmd := &cobra.Command{
		Use:   "purge [--older-than 400d]",
		Short: "Remove payloads of sessions past retention (LOGBOOK_RETENTION), except those on hold",
		Long: `Remove the payloads of every session whose last event is older than the retention
period and that no legal hold covers. Each event's skeleton (ids, seq, type, actor, time,
payload hash, chain hashes) stays, so chains still verify; each purged session gets an
append-only purge record. The content of shared files that only purged sessions held goes
too: from the database with the purge, and from the bucket (LOGBOOK_BLOB_URL) right after.
Runs as logbook_retention (LOGBOOK_RETENTION_DATABASE_URL).`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			ctx := c.Context()
			period := olderThan
			if period == "" {
				period = e.getenv("LOGBOOK_RETENTION")
			}
			keep, err := audit.ParseRetention(period)
			if err != nil {
				return usageError{err}
			}
			if keep == 0 {
				return usageError{errors.New("retention is off: set LOGBOOK_RETENTION or --older-than (e.g. 400d)")}
			}
			who, err := operator(e, as)
			if err != nil {
				return err
			}
			pool, err := openRetentionPool(ctx, e)
			if err != nil {
				return err
			}
			defer pool.Close()
			ret, err := audit.NewRetention(pool, keep)
			if err != nil {
				return err
			}
			fs, err := retentionBucket(ctx, e, pool)
			if err != nil {
				return err
			}
			if fs != nil {
				defer fs.Close()
			}
			ps, err := ret.Purge(ctx, who, time.Now())
			if err != nil {
				return err
			}
			for _, p := range ps {
				fmt.Fprintf(e.stdout, "purged session %s seqs %d..%d (%d payloads); head %d %s\n",
					p.Session, p.FromSeq, p.ToSeq, p.Purged, p.HeadSeq, p.HeadHash)
			}
			fmt.Fprintf(e.stdout, "%d sessions purged (retention %s)\n", len(ps), audit.FormatRetention(keep))
			// The bucket's copies of content the purge left unreferenced go too (content kept
			// in the database went with the purge).
			if fs != nil {
				deleted, err := ret.WithFiles(fs).DeletePurgedFiles(ctx)
				if len(deleted) > 0 {
					fmt.Fprintf(e.stdout, "%d purged files' content deleted from the bucket\n", len(deleted))
				}
				if err != nil {
					return err
				}
			} else if pending, err := ret.PendingFiles(ctx); err != nil {
				return err
			} else if len(pending) > 0 {
				fmt.Fprintf(e.stderr, "logbook: warning: %d purged files' content waits in the bucket: set LOGBOOK_BLOB_URL and run purge again to delete it\n", len(pending))
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&olderThan, "older-than", "", "retention period (default LOGBOOK_RETENTION), e.g. 400d")
	cmd.Flags().StringVar(&as, "as", "", "who (default LOGBOOK_AUDIT_OPERATOR, USER, then the OS account)")
	return cmd
}

// newAuditRunsCmd is `logbook audit runs` (cobra's shape, as every subcommand; what it runs is its own).
func newAuditRunsCmd(e env) *cobra.Command {
	var name string
	cmd := &cobra.Command{
		Use:   "runs [--schedule <name>]",
		Short: "List scheduled export runs and their outcome",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			return withAudit(c.Context(), e, nil, func(_ *session.Store, pool *pgxpool.Pool) error {
				runs, err := audit.Runs(c.Context(), pool, name)
				if err != nil {
					return err
				}
				tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "RUN\tWINDOW\tSTATUS\tEVENTS\tERROR")
				for _, r := range runs {
					fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\n", r.ID, r.Window, r.Status, r.Events, r.Err)
				}
				return tw.Flush()
			})
		},
	}
	cmd.Flags().StringVar(&name, "schedule", "default", "schedule name")
	return cmd
}

// redactURL hides a password in a destination URL.
func redactURL(s string) string {
	if u, err := url.Parse(s); err == nil && u.Scheme != "" {
		return u.Redacted()
	}
	return s
}
