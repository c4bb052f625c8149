package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/logbook/logbook/audit"
	"github.com/logbook/logbook/bot/stream"
	"github.com/logbook/logbook/bot/stream/webhooks"
	"github.com/logbook/logbook/session"
)

// streamConfig is the record streamed out (issue 51): outbound webhooks and the audit stream,
// each a sink of one tailer (bot/stream).
type streamConfig struct {
	// Webhooks are LOGBOOK_WEBHOOKS (nil: none).
	Webhooks map[string]webhooks.Webhook `json:"-"`
	// WebhookMaxAge is how long a webhook may fail before what it cannot take is a dead letter
	// (LOGBOOK_WEBHOOK_MAX_AGE, default 1h).
	WebhookMaxAge time.Duration
	// Audit are LOGBOOK_AUDIT_STREAM's destinations: "stdout", "otlp", or a file's path.
	Audit []string
	// OTLPLogs and OTLPHeaders are where "otlp" sends (OTEL_EXPORTER_OTLP_*).
	OTLPLogs    string
	OTLPHeaders map[string]string `json:"-"`
	// Stdout is serve's standard output, for "stdout".
	Stdout io.Writer `json:"-"`
}

// readStreams reads the streams' settings.
func (cfg *serveConfig) readStreams(e env) error {
	r := envReader{e: e}
	cfg.Streams.WebhookMaxAge = r.duration("LOGBOOK_WEBHOOK_MAX_AGE")
	if r.err != nil {
		return r.err
	}
	var err error
	if cfg.Streams.Webhooks, err = webhooks.Parse(e.getenv("LOGBOOK_WEBHOOKS"), e.getenv); err != nil {
		return fmt.Errorf("LOGBOOK_WEBHOOKS: %w", err)
	}
	if cfg.Streams.Audit, err = parseAuditStream(e); err != nil {
		return err
	}
	cfg.Streams.OTLPLogs, cfg.Streams.OTLPHeaders, cfg.Streams.Stdout = otlpLogsURL(e), otlpHeaders(e), e.stdout
	return nil
}

// parseAuditStream reads LOGBOOK_AUDIT_STREAM: comma-separated destinations, each stdout,
// otlp (OTEL_EXPORTER_OTLP_LOGS_ENDPOINT or OTEL_EXPORTER_OTLP_ENDPOINT + /v1/logs) or the path
// of a file.
func parseAuditStream(e env) ([]string, error) {
	var out []string
	seen := map[string]bool{}
	for _, d := range strings.Split(e.getenv("LOGBOOK_AUDIT_STREAM"), ",") {
		d = strings.TrimSpace(d)
		if d == "" {
			continue
		}
		if seen[d] {
			return nil, fmt.Errorf("LOGBOOK_AUDIT_STREAM: %q twice", d)
		}
		seen[d] = true
		if d == "otlp" && otlpLogsURL(e) == "" {
			return nil, errors.New("LOGBOOK_AUDIT_STREAM=otlp needs OTEL_EXPORTER_OTLP_LOGS_ENDPOINT or OTEL_EXPORTER_OTLP_ENDPOINT")
		}
		out = append(out, d)
	}
	return out, nil
}

// otlpLogsURL is where OTLP logs go: OTEL_EXPORTER_OTLP_LOGS_ENDPOINT as it is, else
// OTEL_EXPORTER_OTLP_ENDPOINT + /v1/logs (the specification's rule).
func otlpLogsURL(e env) string {
	if u := strings.TrimSpace(e.getenv("OTEL_EXPORTER_OTLP_LOGS_ENDPOINT")); u != "" {
		return u
	}
	if u := strings.TrimSpace(e.getenv("OTEL_EXPORTER_OTLP_ENDPOINT")); u != "" {
		return strings.TrimRight(u, "/") + "/v1/logs"
	}
	return ""
}

// otlpHeaders reads OTEL_EXPORTER_OTLP_LOGS_HEADERS or OTEL_EXPORTER_OTLP_HEADERS: k=v,k=v.
func otlpHeaders(e env) map[string]string {
	raw := firstEnv(e, "OTEL_EXPORTER_OTLP_LOGS_HEADERS", "OTEL_EXPORTER_OTLP_HEADERS")
	out := map[string]string{}
	for _, kv := range strings.Split(raw, ",") {
		k, v, ok := strings.Cut(kv, "=")
		if ok && strings.TrimSpace(k) != "" {
			out[strings.TrimSpace(k)] = strings.TrimSpace(v)
		}
	}
	return out
}

// buildStreams adds the tailer of the configured sinks as a service (none configured: none).
func (w *wiring) buildStreams(store *session.Store) error {
	cfg := w.cfg.Streams
	var sinks []stream.Sink
	for _, s := range webhooks.NewSinks(cfg.Webhooks, store, webhooks.Options{MaxAge: cfg.WebhookMaxAge,
		PublicURL: w.cfg.Footer.PublicURL, Log: w.log.With().Str("part", "webhooks").Logger()}) {
		sinks = append(sinks, s)
	}
	for _, d := range cfg.Audit {
		switch d {
		case "stdout":
			sinks = append(sinks, audit.NewLineStream("audit:stdout", cfg.Stdout, store))
		case "otlp":
			sinks = append(sinks, audit.NewOTLPStream("audit:otlp", cfg.OTLPLogs, cfg.OTLPHeaders, store))
		default:
			f, err := os.OpenFile(d, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
			if err != nil {
				return fmt.Errorf("LOGBOOK_AUDIT_STREAM: %w", err)
			}
			w.closers = append(w.closers, func() { f.Close() })
			sinks = append(sinks, audit.NewLineStream("audit:file:"+d, f, store))
		}
	}
	if len(sinks) == 0 {
		return nil
	}
	names := make([]string, len(sinks))
	for i, s := range sinks {
		names[i] = s.Name()
	}
	w.log.Info().Strs("sinks", names).Msg("streams: the log goes out to these sinks (LOGBOOK_WEBHOOKS, LOGBOOK_AUDIT_STREAM)")
	t := stream.New(store, sinks, stream.Options{Owner: replicaOwner(), Lease: w.cfg.LeaseTTL,
		Log: w.log.With().Str("part", "streams").Logger()})
	w.services = append(w.services, service{name: "streams", run: t.Run})
	return nil
}

// newWebhooksCmd is `logbook webhooks`: the dead letters of LOGBOOK_WEBHOOKS.
func newWebhooksCmd(e env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "webhooks",
		Short: "List and redeliver what outbound webhooks could not deliver (DATABASE_URL, LOGBOOK_WEBHOOKS)",
	}
	var sink string
	var all bool
	failed := &cobra.Command{
		Use:   "failed",
		Short: "List the dead letters: events a webhook could not deliver within LOGBOOK_WEBHOOK_MAX_AGE",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			return withStreamStore(c.Context(), e, func(store *session.Store) error {
				ds, err := store.DeadLetters(c.Context(), session.DeadLetterFilter{Sink: sink, Redelivered: all})
				if err != nil {
					return err
				}
				return printDeadLetters(e.stdout, ds)
			})
		},
	}
	failed.Flags().StringVar(&sink, "webhook", "", "only this webhook's")
	failed.Flags().BoolVar(&all, "all", false, "also those redelivered already")
	var rsink string
	var every bool
	redeliver := &cobra.Command{
		Use:   "redeliver [<id>...]",
		Short: "Send dead letters again (by id, or --all), signed with their original webhook-id",
		RunE: func(c *cobra.Command, args []string) error {
			if len(args) == 0 && !every {
				return usageError{errors.New("webhooks redeliver: name dead letters by id (logbook webhooks failed), or --all")}
			}
			f := session.DeadLetterFilter{Sink: rsink}
			for _, a := range args {
				id, err := strconv.ParseInt(a, 10, 64)
				if err != nil || id <= 0 {
					return usageError{fmt.Errorf("webhooks redeliver: %q is not a dead letter's id", a)}
				}
				f.IDs = append(f.IDs, id)
			}
			ws, err := webhooks.Parse(e.getenv("LOGBOOK_WEBHOOKS"), e.getenv)
			if err != nil {
				return fmt.Errorf("LOGBOOK_WEBHOOKS: %w", err)
			}
			return withStreamStore(c.Context(), e, func(store *session.Store) error {
				res, err := webhooks.Redeliver(c.Context(), store, ws, f, webhooks.Options{PublicURL: e.getenv("LOGBOOK_PUBLIC_URL")})
				if err != nil {
					return err
				}
				failed := 0
				for _, r := range res {
					if r.Err != nil {
						failed++
						fmt.Fprintf(e.stdout, "%d\t%s\t%s.%d\tfailed: %v\n", r.Letter.ID, r.Letter.Sink, r.Letter.Session, r.Letter.Seq, r.Err)
						continue
					}
					fmt.Fprintf(e.stdout, "%d\t%s\t%s.%d\tdelivered\n", r.Letter.ID, r.Letter.Sink, r.Letter.Session, r.Letter.Seq)
				}
				switch {
				case len(res) == 0:
					fmt.Fprintln(e.stdout, "no dead letters to redeliver")
				case failed > 0:
					return exitError{1, fmt.Errorf("%d of %d dead letters could not be delivered", failed, len(res))}
				}
				return nil
			})
		},
	}
	redeliver.Flags().StringVar(&rsink, "webhook", "", "only this webhook's")
	redeliver.Flags().BoolVar(&every, "all", false, "every dead letter not redelivered yet")
	cmd.AddCommand(failed, redeliver)
	return cmd
}

func printDeadLetters(w io.Writer, ds []session.DeadLetter) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tWEBHOOK\tWEBHOOK-ID\tTYPE\tATTEMPTS\tDEAD AT\tREDELIVERED\tLAST ERROR")
	for _, d := range ds {
		re := "-"
		if !d.Redelivered.IsZero() {
			re = d.Redelivered.UTC().Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s.%d\t%s\t%d\t%s\t%s\t%s\n", d.ID, d.Sink, d.Session, d.Seq, d.WebhookType, d.Attempts,
			d.DeadAt.UTC().Format(time.RFC3339), re, d.LastError)
	}
	return tw.Flush()
}

// withStreamStore opens the application's store (DATABASE_URL, or dev's) for fn.
func withStreamStore(ctx context.Context, e env, fn func(*session.Store) error) error {
	dsn, err := cliDatabaseURL(ctx, e)
	if err != nil {
		return err
	}
	pool, err := session.Connect(ctx, dsn, session.PoolOptions{MaxConns: 2})
	if err != nil {
		return err
	}
	defer pool.Close()
	store := session.NewStore(pool, session.Options{})
	if err := checkMigrated(ctx, store); err != nil {
		return err
	}
	return fn(store)
}

// newAuditTailCmd is `logbook audit tail`: the audit stream, read by the operator.
func newAuditTailCmd(e env) *cobra.Command {
	var follow, asJSON bool
	var n int
	var as string
	cmd := &cobra.Command{
		Use:   "tail",
		Short: "Show the last events of the log in commit order, and with --follow each new one as it commits",
		Long: `Show the log as the audit stream carries it (LOGBOOK_AUDIT_STREAM): the last -n events in commit
order, then, with --follow, each event as it commits, until interrupted. --json prints the
export's JSON line of each (with its chain position: session_id, seq, prev_hash, hash); without
it one line per event. The read is recorded in the audit access records (action tail).`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			who, err := operator(e, as)
			if err != nil {
				return err
			}
			rec := &accessRecord{who: who, action: "tail", filters: map[string]any{"n": n, "follow": follow}}
			return withAudit(c.Context(), e, rec, func(store *session.Store, _ *pgxpool.Pool) error {
				return auditTail(c.Context(), e, store, n, follow, asJSON)
			})
		},
	}
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing events as they commit")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print each event's JSON line (the export's format)")
	cmd.Flags().IntVarP(&n, "lines", "n", 20, "how many of the last events to show first")
	cmd.Flags().StringVar(&as, "as", "", "who reads (default LOGBOOK_AUDIT_OPERATOR, then USER)")
	return cmd
}

func auditTail(ctx context.Context, e env, store *session.Store, n int, follow, asJSON bool) error {
	cur, err := store.TailCursor(ctx, n)
	if err != nil {
		return err
	}
	places := map[session.ID]audit.Place{}
	var buf []byte
	for {
		evs, next, err := store.ReadAll(ctx, cur, 500)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		for _, ev := range evs {
			pl, ok := places[ev.SessionID]
			if !ok {
				s, err := store.Session(ctx, ev.SessionID)
				if err != nil {
					return err
				}
				pl = audit.Place{Channel: s.Key.Channel, ThreadTS: s.Key.ThreadTS}
				places[ev.SessionID] = pl
			}
			if asJSON {
				buf = audit.EventLine(buf[:0], ev, pl)
			} else {
				buf = fmt.Appendf(buf[:0], "%s  %-7d %s/%s  %s.%d  %-22s %s:%s  %x\n", ev.CreatedAt.UTC().Format("2006-01-02T15:04:05.000Z"),
					ev.Position, pl.Channel, pl.ThreadTS, ev.SessionID, ev.Seq, ev.Type, ev.Actor.Kind, ev.Actor.ID, shortHash(ev.Hash))
			}
			if _, err := e.stdout.Write(buf); err != nil {
				return err
			}
		}
		cur = next
		if len(evs) == 500 {
			continue
		}
		if !follow {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(250 * time.Millisecond):
		}
	}
}

func shortHash(h []byte) []byte {
	if len(h) > 6 {
		return h[:6]
	}
	return h
}
