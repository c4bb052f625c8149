package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"
	"github.com/spf13/cobra"

	"github.com/logbook/logbook/session"
	"github.com/logbook/logbook/session/search"
	"github.com/logbook/logbook/session/transcript"
)

// syncWait bounds how long a one-shot command waits for the search index to catch up with
// transactions that are still running.
const syncWait = 5 * time.Second

// readDeps is what transcript and search need: the log, the search projection, and its indexer.
type readDeps struct {
	pool     *pgxpool.Pool
	store    *session.Store
	searcher *search.Searcher
	indexer  *search.Indexer
	// reads are transcript's reads of the log: store, or a standby's (onStandby).
	reads interface {
		Session(ctx context.Context, id session.ID) (session.Session, error)
		Events(ctx context.Context, id session.ID, r session.Range) ([]session.Event, error)
		NotesByID(ctx context.Context, team, channel string, ids []int64) ([]session.Note, error)
		Forks(ctx context.Context, parent session.ID) ([]session.Fork, error)
	}
}

// onStandby sends transcript's and search's reads to LOGBOOK_READ_DATABASE_URL, a streaming
// standby, when it is set: read your writes (what the primary had committed when the read
// began, the index just synced included), else from the primary, as serve's pages. It returns
// what closes the standby's pool.
func (d *readDeps) onStandby(ctx context.Context, e env) (func(), error) {
	dsn := strings.TrimSpace(e.getenv("LOGBOOK_READ_DATABASE_URL"))
	if dsn == "" {
		return func() {}, nil
	}
	maxWait, err := envDuration(e, "LOGBOOK_READ_MAX_WAIT")
	if err != nil {
		return nil, err
	}
	pool, err := session.Connect(ctx, dsn, session.PoolOptions{MaxConns: 4, Lazy: true, ConnectTimeout: 2 * time.Second})
	if err != nil {
		return nil, fmt.Errorf("LOGBOOK_READ_DATABASE_URL: %w", err)
	}
	sb := session.NewStandby(d.pool, pool, session.StandbyOptions{MaxWait: maxWait, Observer: cliStandbyObserver{e}})
	d.reads, d.searcher = sb.Reads(), d.searcher.OnStandby(sb, session.ReadYourWrites)
	return pool.Close, nil
}

// cliStandbyObserver says on stderr when a read goes to the primary because the standby lags
// or does not answer.
type cliStandbyObserver struct{ e env }

func (o cliStandbyObserver) Read(server, reason string) {
	if server == session.ServerPrimary && reason == session.FallbackLagging {
		fmt.Fprintln(o.e.stderr, "logbook: note: the standby (LOGBOOK_READ_DATABASE_URL) has not caught up within "+
			"LOGBOOK_READ_MAX_WAIT: reading the primary")
	}
}
func (o cliStandbyObserver) Lag(session.Lag) {}
func (o cliStandbyObserver) Reachable()      {}
func (o cliStandbyObserver) Unreachable(err error) {
	fmt.Fprintf(o.e.stderr, "logbook: warning: the standby (LOGBOOK_READ_DATABASE_URL) does not answer, reading the primary: %v\n", err)
}

// openRead connects the reads of transcript, search, takeover and handback, once the schema
// is known to be migrated (checkMigrated). Close d.pool when done.
func openRead(ctx context.Context, e env) (*readDeps, error) {
	dsn, err := cliDatabaseURL(ctx, e)
	if err != nil {
		return nil, err
	}
	pool, err := session.Connect(ctx, dsn, session.PoolOptions{MaxConns: 4})
	if err != nil {
		return nil, err
	}
	store := session.NewStore(pool, session.Options{})
	if err := checkMigrated(ctx, store); err != nil {
		pool.Close()
		return nil, err
	}
	log := zerolog.New(e.stderr).Level(zerolog.WarnLevel).With().Timestamp().Logger()
	return &readDeps{
		pool:     pool,
		store:    store,
		reads:    store,
		searcher: search.NewSearcher(pool, search.Options{WorkspaceDomain: e.getenv("LOGBOOK_WORKSPACE_DOMAIN")}),
		indexer:  search.NewIndexer(store, pool, log, search.IndexerOptions{}),
	}, nil
}

// standbyReads says withRead sends the command's reads to LOGBOOK_READ_DATABASE_URL when it
// is set (onStandby); primaryReads keeps them on the primary.
const (
	standbyReads = true
	primaryReads = false
)

// withRead is the preamble and close of the one-shot read commands (transcript, search,
// usage, config): it opens the reads (openRead), moves them to the standby when standby is
// set and LOGBOOK_READ_DATABASE_URL names one (onStandby), runs fn, and closes what it
// opened. takeover and handback keep the connection past one function and use openRead.
func withRead(ctx context.Context, e env, standby bool, fn func(d *readDeps) error) error {
	d, err := openRead(ctx, e)
	if err != nil {
		return err
	}
	defer d.pool.Close()
	if standby {
		closeStandby, err := d.onStandby(ctx, e)
		if err != nil {
			return err
		}
		defer closeStandby()
	}
	return fn(d)
}

// sessionID is the id of the session ref names: its id, else the session of its thread, looked
// up in the search projection (synced first when the thread is not there yet: a reply's ts
// is known once indexed).
func (d *readDeps) sessionID(ctx context.Context, e env, ref sessionRef) (session.ID, error) {
	if ref.id != (session.ID{}) {
		return ref.id, nil
	}
	id, err := d.searcher.SessionByThread(ctx, ref.channel, ref.ts)
	if errors.Is(err, session.ErrNotFound) {
		d.sync(ctx, e)
		id, err = d.searcher.SessionByThread(ctx, ref.channel, ref.ts)
	}
	return id, err
}

// sync brings the search projection up to date before a one-shot read; when it cannot
// (a long transaction elsewhere, or a role without write access to the projection) it says
// so and the command goes on with what is indexed.
func (d *readDeps) sync(ctx context.Context, e env) {
	ctx, cancel := context.WithTimeout(ctx, syncWait)
	defer cancel()
	if err := d.indexer.Sync(ctx); err != nil {
		fmt.Fprintf(e.stderr, "logbook: warning: the search index may miss the newest events: %v\n", err)
	}
}

func newTranscriptCmd(e env) *cobra.Command {
	var (
		format, tz    string
		all, revealed bool
	)
	cmd := &cobra.Command{
		Use:   "transcript <session id | Slack permalink | channel thread-ts>",
		Short: "Print a session's transcript (DATABASE_URL)",
		Long: `Print a session as text, Markdown, HTML or JSON. An operator's tool: it prints any logged
session, whatever its channel's visibility now (the web pages hide private ones).

The session is named by its id, by a Slack permalink of the thread or of any message in it,
or by a channel id and a thread ts as two arguments:

  logbook transcript 01a226cc-2ba6-7d4b-9f06-a738362db19d
  logbook transcript https://acme.slack.com/archives/C0000001/p1700000000001200
  logbook transcript C0000001 1700000000.001200

By default the transcript is the conversation: user and assistant messages and, compactly,
tool calls and their results. --all adds every marker event and full tool output. Deleted
messages show as "[message deleted]"; --reveal-deleted shows what they said, and needs a
database role that is a member of logbook_auditor. Times are ISO 8601 in UTC unless --tz
names a timezone (e.g. Europe/Berlin, Local). LOGBOOK_WORKSPACE_DOMAIN (acme.slack.com) adds a
link to the thread.`,
		Args: cobra.RangeArgs(1, 2),
		RunE: func(c *cobra.Command, args []string) error {
			f, err := transcript.ParseFormat(format)
			if err != nil {
				return usage(e, c, err)
			}
			opts := transcript.Options{Format: f, All: all, RevealDeleted: revealed}
			if tz != "" {
				if opts.Location, err = time.LoadLocation(tz); err != nil {
					return usage(e, c, fmt.Errorf("unknown timezone %q: use an IANA name such as Europe/Berlin", tz))
				}
			}
			ref, err := parseSessionRef(args)
			if err != nil {
				return usage(e, c, err)
			}
			ctx := c.Context()
			return withRead(ctx, e, standbyReads, func(d *readDeps) error {
				return printTranscript(ctx, e, d, ref, opts)
			})
		},
	}
	cmd.Flags().StringVar(&format, "format", "text", "output format: text, md, html or json")
	cmd.Flags().BoolVar(&all, "all", false, "include marker events and full tool output")
	cmd.Flags().StringVar(&tz, "tz", "", "show times in this IANA timezone (default: ISO 8601 in UTC)")
	cmd.Flags().BoolVar(&revealed, "reveal-deleted", false, "show what deleted messages said (auditors only)")
	return cmd
}

// printTranscript renders the session ref names, read through d, as opts say; a reveal of
// deleted messages needs the auditor role.
func printTranscript(ctx context.Context, e env, d *readDeps, ref sessionRef, opts transcript.Options) error {
	if opts.RevealDeleted {
		var ok bool
		if err := d.pool.QueryRow(ctx, `SELECT pg_has_role(current_user, 'logbook_auditor', 'MEMBER')`).Scan(&ok); err != nil {
			return fmt.Errorf("check the auditor role: %w", err)
		}
		if !ok {
			return errors.New("--reveal-deleted is for auditors: the database role must be a member of logbook_auditor")
		}
	}
	id, err := d.sessionID(ctx, e, ref)
	if err != nil {
		return err
	}
	sess, err := d.reads.Session(ctx, id)
	if err != nil {
		return err
	}
	evs, err := d.reads.Events(ctx, id, session.Range{})
	if err != nil {
		return err
	}
	// The memory notes its turns were offered, to show them at those turns.
	if opts.Notes, err = d.reads.NotesByID(ctx, sess.Key.Team, sess.Key.Channel, transcript.NoteIDs(evs)); err != nil {
		return err
	}
	if opts.Forks, err = d.reads.Forks(ctx, id); err != nil {
		return err
	}
	opts.Permalink = d.searcher.Permalink(sess.Key.Channel, sess.Key.ThreadTS, "")
	return transcript.Render(e.stdout, sess, evs, opts)
}

// sessionRef names a session: by id, or by channel and a ts in the thread.
type sessionRef struct {
	id          session.ID
	channel, ts string
}

var (
	channelID = regexp.MustCompile(`^[CG][A-Z0-9]{2,}$`)
	slackTS   = regexp.MustCompile(`^\d{9,}\.\d{6}$`)
	permaTS   = regexp.MustCompile(`^p(\d{9,})(\d{6})$`)
)

// parseSessionRef reads a session id, a Slack permalink, "C… ts" or "C…/ts".
func parseSessionRef(args []string) (sessionRef, error) {
	if len(args) == 1 {
		a := strings.TrimSpace(args[0])
		if id, err := session.ParseID(a); err == nil {
			return sessionRef{id: id}, nil
		}
		if u, err := url.Parse(a); strings.Contains(a, "/archives/") || (err == nil && u.Scheme != "" && u.Host != "") {
			return parsePermalink(a)
		}
		if ch, ts, ok := strings.Cut(a, "/"); ok {
			args = []string{ch, ts}
		} else {
			return sessionRef{}, fmt.Errorf("%q is not a session id, a Slack permalink or a channel and thread ts", a)
		}
	}
	ch, ts := strings.TrimPrefix(strings.TrimSpace(args[0]), "#"), strings.TrimSpace(args[1])
	if !channelID.MatchString(ch) {
		return sessionRef{}, fmt.Errorf("%q is not a Slack channel id (like C0000001)", ch)
	}
	if !slackTS.MatchString(ts) {
		return sessionRef{}, fmt.Errorf("%q is not a Slack ts (like 1700000000.001200)", ts)
	}
	return sessionRef{channel: ch, ts: ts}, nil
}

// parsePermalink reads https://<domain>/archives/<channel>/p<ts digits>[?thread_ts=<ts>].
func parsePermalink(s string) (sessionRef, error) {
	u, err := url.Parse(s)
	if err != nil {
		return sessionRef{}, fmt.Errorf("%q is not a Slack permalink: %w", s, err)
	}
	if host := strings.ToLower(u.Hostname()); host != "slack.com" && !strings.HasSuffix(host, ".slack.com") {
		return sessionRef{}, fmt.Errorf("%q is not a Slack permalink: %q is not a Slack workspace (https://<workspace>.slack.com/archives/<channel>/p<ts>)", s, u.Host)
	}
	parts := strings.Split(strings.Trim(u.Path, "/"), "/")
	if len(parts) != 3 || parts[0] != "archives" || !channelID.MatchString(parts[1]) {
		return sessionRef{}, fmt.Errorf("%q is not a Slack permalink (https://<workspace>.slack.com/archives/<channel>/p<ts>)", s)
	}
	if ts := u.Query().Get("thread_ts"); slackTS.MatchString(ts) {
		return sessionRef{channel: parts[1], ts: ts}, nil
	}
	m := permaTS.FindStringSubmatch(parts[2])
	if m == nil {
		return sessionRef{}, fmt.Errorf("%q is not a Slack permalink: %q is not a message ts", s, parts[2])
	}
	return sessionRef{channel: parts[1], ts: m[1] + "." + m[2]}, nil
}

func newSearchCmd(e env) *cobra.Command {
	var (
		q            search.Query
		since, until string
		sessionArg   string
		asJSON       bool
	)
	cmd := &cobra.Command{
		Use:   `search "<query>"`,
		Short: "Search every session's messages and the channels' memory notes (DATABASE_URL)",
		Long: `Search user and assistant messages (and, with --tools, tool calls and output) and the
channels' memory notes (/logbook remember, the agent's remember tool). --kind notes searches
the notes alone, --kind messages the messages alone. A note forgotten with /logbook forget is
not found, nor one retention purged.

The query is websearch-style: words, "quoted phrases", -excluded words, OR. Hits are ranked
by relevance blended with recency and show a snippet, the session id and, with
LOGBOOK_WORKSPACE_DOMAIN (acme.slack.com), a link to the message in Slack.

--since and --until take a date (2024-05-01), a time (2024-05-01T15:04:05Z) or an age
(90m, 36h, 7d, 2w).

This is an operator's tool: it shows every logged session that the database role can read,
including sessions whose channel became private since and channels shared with other
organisations (Slack Connect); it asks Slack nothing. People search through the web pages,
/logbook search and the agent, which hide channels that are private now and keep searches
from a shared channel inside it. Retention-purged text is gone here too.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			q.Text = strings.Join(args, " ")
			if q.Kind != search.KindAll && q.Kind != search.KindMessages && q.Kind != search.KindNotes {
				return usage(e, c, fmt.Errorf("--kind %q: give all, messages or notes", q.Kind))
			}
			if q.Kind == search.KindNotes && q.Tools {
				return usage(e, c, errors.New("--tools searches tool calls, which are messages: not with --kind notes"))
			}
			if q.Limit < 1 || q.Limit > search.MaxLimit {
				return usage(e, c, fmt.Errorf("--limit %d: give a number of hits from 1 to %d", q.Limit, search.MaxLimit))
			}
			now := time.Now()
			var err error
			if q.Since, err = parseWhen(since, now); err != nil {
				return usage(e, c, fmt.Errorf("--since: %w", err))
			}
			if q.Until, err = parseWhen(until, now); err != nil {
				return usage(e, c, fmt.Errorf("--until: %w", err))
			}
			if sessionArg != "" {
				if q.Session, err = session.ParseID(sessionArg); err != nil {
					return usage(e, c, fmt.Errorf("--session: %w", err))
				}
			}
			ctx := c.Context()
			return withRead(ctx, e, standbyReads, func(d *readDeps) error {
				d.sync(ctx, e)
				page, err := d.searcher.SearchPage(ctx, q)
				if errors.Is(err, search.ErrEmptyQuery) || errors.Is(err, search.ErrInvalidQuery) {
					fmt.Fprintln(e.stderr, "logbook search:", err)
					return flagError{err}
				}
				if err != nil {
					return err
				}
				if asJSON {
					enc := json.NewEncoder(e.stdout)
					enc.SetIndent("", "  ")
					if err := enc.Encode(page.Hits); err != nil {
						return err
					}
				} else {
					writeHits(e, q.Text, page.Hits)
				}
				if page.More != "" {
					fmt.Fprintf(e.stderr, "logbook search: stopped early (common words, rare together: the newest messages were read, not the whole log); older matches: the same command with --after %s\n", page.More)
				}
				return nil
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&q.Actor, "actor", "", `only messages by this person: a Slack user id, a display name, or "bot"`)
	f.StringVar(&q.Channel, "channel", "", "only this channel (a Slack channel id)")
	f.StringVar(&sessionArg, "session", "", "only this session (a session id)")
	f.StringVar(&since, "since", "", "only messages at or after this time")
	f.StringVar(&until, "until", "", "only messages before this time")
	f.IntVar(&q.Limit, "limit", search.DefaultLimit, fmt.Sprintf("at most this many hits (1-%d)", search.MaxLimit))
	f.BoolVar(&q.Tools, "tools", false, "search tool calls and tool output too")
	f.StringVar(&q.Kind, "kind", search.KindAll, "what to search: all, messages or notes (channel memory notes)")
	f.BoolVar(&asJSON, "json", false, "print hits as JSON")
	f.StringVar(&q.After, "after", "", "go on from where a search that stopped early ended (the cursor it printed)")
	return cmd
}

func writeHits(e env, query string, hits []search.Hit) {
	if len(hits) == 0 {
		fmt.Fprintf(e.stdout, "Nothing matches %q.\n", query)
		return
	}
	for i, h := range hits {
		title := h.Title
		if title == "" {
			title = "Thread " + h.ThreadTS
		}
		who := h.ActorName
		if who == "" {
			who = h.ActorID
		}
		if h.ActorKind == "bot" {
			who = "logbook"
		}
		snippet := strings.Join(strings.Fields(h.SnippetText("**", "**")), " ")
		if h.Kind == search.HitNote {
			// A note: its id, who asked for it, when, the channel, and its text whole.
			if h.ActorName != "" && h.ActorKind != "bot" {
				who += " (" + h.ActorID + ")"
			}
			fmt.Fprintf(e.stdout, "%d. Memory note %d — #%s, added by %s, %s\n", i+1, h.NoteID, h.Channel, who, h.CreatedAt.UTC().Format(time.RFC3339))
			fmt.Fprintf(e.stdout, "   %s\n", snippet)
			if h.SessionID != (session.ID{}) || h.Permalink != "" {
				fmt.Fprint(e.stdout, "   written from")
				if h.SessionID != (session.ID{}) {
					fmt.Fprintf(e.stdout, " session %s", h.SessionID)
				}
				if h.Permalink != "" {
					fmt.Fprintf(e.stdout, " · %s", h.Permalink)
				}
				fmt.Fprintln(e.stdout)
			}
			continue
		}
		fmt.Fprintf(e.stdout, "%d. %s — #%s, %s, %s\n", i+1, title, h.Channel, who, h.CreatedAt.UTC().Format(time.RFC3339))
		fmt.Fprintf(e.stdout, "   %s\n", snippet)
		fmt.Fprintf(e.stdout, "   session %s", h.SessionID)
		if h.Permalink != "" {
			fmt.Fprintf(e.stdout, " · %s", h.Permalink)
		}
		fmt.Fprintln(e.stdout)
	}
}

var age = regexp.MustCompile(`^(\d+)(m|h|d|w)$`)

// parseWhen reads a date, an RFC 3339 time or an age before now; "" is the zero time.
func parseWhen(s string, now time.Time) (time.Time, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return time.Time{}, nil
	}
	if m := age.FindStringSubmatch(s); m != nil {
		n, err := strconv.Atoi(m[1])
		if err != nil {
			return time.Time{}, fmt.Errorf("%q: %w", s, err)
		}
		unit := map[string]time.Duration{"m": time.Minute, "h": time.Hour, "d": 24 * time.Hour, "w": 7 * 24 * time.Hour}[m[2]]
		return now.Add(-time.Duration(n) * unit), nil
	}
	for _, layout := range []string{time.RFC3339, "2006-01-02T15:04", "2006-01-02"} {
		if t, err := time.Parse(layout, s); err == nil {
			return t, nil
		}
	}
	return time.Time{}, fmt.Errorf("%q is not a date (2024-05-01), a time (2024-05-01T15:04:05Z) or an age (7d)", s)
}

// usage reports a bad argument in one line, with where to read more; exit status 2.
func usage(e env, c *cobra.Command, err error) error {
	fmt.Fprintf(e.stderr, "logbook %s: %v (see %s --help)\n", c.Name(), err, c.CommandPath())
	return flagError{err}
}
