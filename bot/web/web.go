package web

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/logbook/logbook/bot/budget"
	"github.com/logbook/logbook/session"
	"github.com/logbook/logbook/session/search"
	"github.com/logbook/logbook/session/transcript"
)

// sessionReader is what the transcript pages need from the log (session.Store has it).
type sessionReader interface {
	Session(ctx context.Context, id session.ID) (session.Session, error)
	Events(ctx context.Context, id session.ID, r session.Range) ([]session.Event, error)
	// HasFile reports whether the session holds the content sha (its reference to it).
	HasFile(ctx context.Context, id session.ID, sha string) (bool, error)
	// NotesByID reads the channel memory notes a session's turns were offered.
	NotesByID(ctx context.Context, team, channel string, ids []int64) ([]session.Note, error)
	// Forks lists the sessions branched from a session (issue 50).
	Forks(ctx context.Context, parent session.ID) ([]session.Fork, error)
}

// pinner is a sessionReader that reads a streaming standby (session.Reads): Pin decides once
// per request which server its reads come from, after waiting (bounded) for the standby to
// show everything committed before the request, so the page reads one server, its reply just
// posted included.
type pinner interface {
	Pin(ctx context.Context) context.Context
}

// pinned makes h's reads of the log come from one server, decided at once (see pinner).
func (s *server) pinned(h http.HandlerFunc) http.HandlerFunc {
	p, ok := s.cfg.Sessions.(pinner)
	if !ok {
		return h
	}
	return func(w http.ResponseWriter, r *http.Request) { h(w, r.WithContext(p.Pin(r.Context()))) }
}

// FileReader reads stored file content by its sha256 (filestore.Store has it):
// session.ErrNotFound when there is none.
type FileReader interface {
	FileContent(ctx context.Context, sha string) ([]byte, error)
}

// finder is what the list and search pages need (search.Searcher has it).
type finder interface {
	SearchPage(ctx context.Context, q search.Query) (search.Page, error)
	Recent(ctx context.Context, before time.Time, limit int) ([]search.Summary, error)
	Permalink(channel, threadTS, ts string) string
}

// Config configures Handler. Sessions, Finder, AccessLog and Access are required.
type Config struct {
	Sessions  sessionReader // *session.Store, or *session.Reads on a standby
	Finder    finder        // *search.Searcher
	AccessLog execer        // a pool whose role may INSERT into access_log (logbook_app)
	Access    Access
	// Visibility re-checks, on every request, whether a session's channel is still public
	// (directory.Directory: the same decision, and the same conversations.info answers, as search
	// in Slack; the pages keep no cache of their own); nil: every logged channel counts as
	// public (the log never holds private channels to begin with).
	Visibility ChannelVisibility
	// Channels names channels (Slack's conversations.info, cached by the caller) so pages say
	// #general, not C0000001; nil, or a name it cannot learn: the id.
	Channels ChannelNamer
	// Location shows times in this timezone; a reader may pass ?tz=Area/City. nil: ISO 8601 UTC.
	Location *time.Location
	Log      zerolog.Logger
	Now      func() time.Time // default time.Now
	// RecentLimit is how many sessions the list shows; default 50.
	RecentLimit int
	// Files serves the content of the files a session holds (GET /sessions/{id}/files/{sha256})
	// and makes the transcript page link them and show images inline; nil: files are listed,
	// not linked.
	Files FileReader
	// SignIns keeps browsers signed in through the sign-in form (*session.Store has it): the
	// cookie holds an opaque id, the store its hash. nil: no sign-in form; tokens work as an
	// Authorization header only.
	SignIns SignInStore
	// Usage reads the model spend for the usage page (GET /usage), in Currency (the prices'
	// currency); nil: no usage page.
	Usage    UsageReader
	Feedback FeedbackReader // the usage page's 👍/👎 per channel and model; nil: none shown
	Currency string
	// Runs reads the runs of schedules and hooks for GET /automations (automations.go); nil:
	// no such page.
	Runs RunReader
	// PublicURL is the pages' external address (LOGBOOK_PUBLIC_URL): a form sent from its
	// origin counts as same-origin, as one sent from the request's own Host does.
	PublicURL string
	// MCP connects remote MCP servers that use OAuth (GET /mcp/{server}/connect?channel=C,
	// admins only; mcp.go); nil: no such pages.
	MCP MCPOAuth
	// OIDC, when set, signs people in through the organisation's OpenID Connect provider
	// (/oidc/login, /oidc/callback); it needs SignIns. Tokens and the proxy header keep
	// working beside it.
	OIDC *OIDC
	// ChannelSettings reads a channel's effective settings and their history for GET
	// /channels/{channel}/settings, auditors only (channelsettings.go); nil: no such page.
	ChannelSettings ChannelSettingsReader
}

// SignInStore keeps the browsers' sign-ins (session.Store has it): created at sign-in, read
// on every request with the cookie, ended at sign-out. WebSession answers session.ErrNotFound
// for an id that is unknown, ended or expired by now.
type SignInStore interface {
	CreateWebSession(ctx context.Context, ws session.WebSession) error
	WebSession(ctx context.Context, idHash [32]byte, now time.Time) (session.WebSession, error)
	EndWebSession(ctx context.Context, idHash [32]byte) (bool, error)
}

type server struct {
	cfg  Config
	oidc *oidcSignIn // nil: no OIDC sign-in
	auth *authenticator
	vis  ChannelVisibility
	now  func() time.Time
	log  zerolog.Logger
}

// Handler returns the pages' handler. It returns an error when a required part is missing
// or when Access admits nobody.
func Handler(cfg Config) (http.Handler, error) {
	if cfg.Sessions == nil || cfg.Finder == nil || cfg.AccessLog == nil {
		return nil, errors.New("web: Sessions, Finder and AccessLog are required")
	}
	if len(cfg.Access.Tokens) == 0 && strings.TrimSpace(cfg.Access.ProxyHeader) == "" && cfg.OIDC == nil {
		return nil, errors.New("web: no access configured: set a bearer token, a trusted proxy header or OIDC (the pages are closed by default)")
	}
	var oidcIn *oidcSignIn
	if cfg.OIDC != nil {
		if cfg.SignIns == nil {
			return nil, errors.New("web: OIDC sign-in needs SignIns, where its sessions are kept")
		}
		var err error
		if oidcIn, err = newOIDCSignIn(*cfg.OIDC); err != nil {
			return nil, err
		}
	}
	if cfg.Access.ProxySecret != "" && (len(cfg.Access.ProxySecret) < 16 || strings.TrimSpace(cfg.Access.ProxyHeader) == "") {
		return nil, errors.New("web: a proxy secret needs a proxy header and at least 16 characters")
	}
	for _, t := range cfg.Access.Tokens {
		if len(t.Secret) < 16 || t.Name == "" {
			return nil, fmt.Errorf("web: token %q: a token needs a name and a secret of at least 16 characters", t.Name)
		}
	}
	now := cfg.Now
	if now == nil {
		now = time.Now
	}
	s := &server{
		cfg:  cfg,
		oidc: oidcIn,
		auth: newAuthenticator(cfg.Access),
		vis:  cfg.Visibility,
		now:  now,
		log:  cfg.Log.With().Str("component", "web").Logger(),
	}
	// The pages' routes; slackemu's mux, alike in shape, serves Slack's endpoints.
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", s.list)
	mux.HandleFunc("GET /sessions/{id}", s.pinned(s.view))
	mux.HandleFunc("GET /sessions/{id}/download", s.pinned(s.download))
	mux.HandleFunc("GET /sessions/{id}/files/{sha256}", s.pinned(s.file))
	mux.HandleFunc("GET /evals/{id}", s.pinned(s.eval)) // eval.go
	mux.HandleFunc("GET /search", s.search)
	if cfg.Usage != nil {
		mux.HandleFunc("GET /usage", s.usage) // usage.go
	}
	if cfg.Runs != nil {
		mux.HandleFunc("GET /automations", s.automations) // automations.go
	}
	if cfg.ChannelSettings != nil {
		mux.HandleFunc("GET /channels/{channel}/settings", s.channelSettings) // channelsettings.go
	}
	if cfg.MCP != nil {
		mux.HandleFunc("GET /mcp/{server}/connect", s.mcpConnect) // mcp.go
		mux.HandleFunc("GET /mcp/callback", s.mcpCallback)
	}
	outer := http.NewServeMux()
	outer.HandleFunc("GET /signin", s.signinForm)
	outer.HandleFunc("POST /signin", s.signin)
	outer.HandleFunc("GET /signout", s.signoutForm)
	outer.HandleFunc("POST /signout", s.signout)
	if s.oidc != nil {
		outer.HandleFunc("GET "+oidcLoginPath, s.oidcLogin)
		outer.HandleFunc("GET "+oidcCallbackPath, s.oidcCallback)
	}
	outer.Handle("/", s.authenticate(mux))
	return s.guard(outer), nil
}

// https reports whether the browser reached the pages over HTTPS: directly, or through a
// trusted proxy that says so.
func (s *server) https(r *http.Request) bool {
	return r.TLS != nil || (s.auth.proxied(r) && strings.EqualFold(r.Header.Get("X-Forwarded-Proto"), "https"))
}

// unauthorized answers the sign-in page with status: the token form when tokens are
// configured, and a pointer to the organisation's sign-in when a proxy header is.
func (s *server) unauthorized(w http.ResponseWriter, r *http.Request, status int, problem string) {
	w.Header().Set("Cache-Control", "no-store")
	if status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="logbook"`)
	}
	msg := "These pages show your workspace's conversations."
	if s.auth.header != "" {
		msg += " Sign in through your organisation's sign-in page."
	}
	data := pageData{Title: "Sign in required", Message: msg, Problem: problem,
		TokenForm: len(s.auth.tokens) > 0 && s.cfg.SignIns != nil}
	if s.oidc != nil {
		data.OIDCLogin = oidcLoginPath
		if next := localPath(r.URL.RequestURI()); next != "/" {
			data.OIDCLogin += "?next=" + url.QueryEscape(next)
		}
	}
	s.page(w, status, "signin", data)
}

func (s *server) authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, ok, tried, err := s.identify(r)
		if err != nil {
			s.log.Error().Err(err).Msg("check a sign-in")
			s.page(w, http.StatusServiceUnavailable, "message", pageData{Title: "Try again", Message: "Your sign-in cannot be checked right now. Please try again shortly."})
			return
		}
		if !ok {
			if tried != "" {
				s.recordFailure(r, "signin", tried, http.StatusUnauthorized)
			}
			s.unauthorized(w, r, http.StatusUnauthorized, "")
			return
		}
		w.Header().Set("Cache-Control", "private, no-store")
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), identityKey{}, id)))
	})
}

// hidden reports whether the session's channel must be hidden from the requester.
func (s *server) hidden(ctx context.Context, channel string) bool {
	if identityFrom(ctx).Auditor {
		return false
	}
	if s.vis == nil {
		return false
	}
	private, err := s.vis.ChannelPrivate(ctx, channel)
	if err != nil {
		s.log.Warn().Err(err).Str("channel", channel).Msg("channel visibility unknown; hiding its sessions from non-auditors")
		return true
	}
	return private
}

func (s *server) location(r *http.Request) *time.Location {
	if tz := r.URL.Query().Get("tz"); tz != "" {
		if loc, err := time.LoadLocation(tz); err == nil {
			return loc
		}
	}
	return s.cfg.Location
}

func (s *server) formatTime(t time.Time, loc *time.Location) string {
	if loc == nil {
		return t.UTC().Format(time.RFC3339)
	}
	return t.In(loc).Format("2006-01-02 15:04 MST")
}

// ChannelNamer answers a channel's name ("" when unknown); directory.Directory is one.
type ChannelNamer interface {
	ChannelName(ctx context.Context, id string) string
}

// channelName is the channel's name for a page, or its id.
func (s *server) channelName(ctx context.Context, id string) string {
	if s.cfg.Channels != nil {
		if n := s.cfg.Channels.ChannelName(ctx, id); n != "" {
			return n
		}
	}
	return id
}

type sessionRow struct {
	search.Summary
	When        string
	ChannelName string
}

func (s *server) list(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	limit := cmp.Or(s.cfg.RecentLimit, 50)
	var before time.Time
	if b := r.URL.Query().Get("before"); b != "" {
		t, err := time.Parse(time.RFC3339Nano, b)
		if err != nil {
			s.page(w, http.StatusBadRequest, "message", pageData{Title: "Bad link", Message: "The 'before' value is not a time."})
			return
		}
		before = t
	}
	sums, err := s.cfg.Finder.Recent(ctx, before, limit)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	loc := s.location(r)
	data := pageData{Title: "Recent sessions"}
	for _, m := range sums {
		if s.hidden(ctx, m.Channel) {
			continue
		}
		data.Sessions = append(data.Sessions, sessionRow{Summary: m, When: s.formatTime(m.LastEventAt, loc), ChannelName: s.channelName(ctx, m.Channel)})
	}
	if len(sums) == limit {
		data.Next = "/?before=" + url.QueryEscape(sums[len(sums)-1].LastEventAt.Format(time.RFC3339Nano))
	}
	s.respond(w, r, "list", data, access{action: "list", results: len(data.Sessions)})
}

// load reads a session for the transcript pages, or answers 404 (recording a, with the
// session and the status).
func (s *server) load(w http.ResponseWriter, r *http.Request, a access) (session.Session, []session.Event, bool) {
	ctx := r.Context()
	id, err := session.ParseID(r.PathValue("id"))
	if err != nil {
		s.notFound(w, r, a)
		return session.Session{}, nil, false
	}
	a.session = id
	sess, err := s.cfg.Sessions.Session(ctx, id)
	if errors.Is(err, session.ErrNotFound) {
		s.notFound(w, r, a)
		return session.Session{}, nil, false
	}
	if err != nil {
		s.fail(w, r, err)
		return session.Session{}, nil, false
	}
	if s.hidden(ctx, sess.Key.Channel) {
		// Hidden sessions look like missing ones: their existence is not for everyone.
		s.notFound(w, r, a)
		return session.Session{}, nil, false
	}
	evs, err := s.cfg.Sessions.Events(ctx, id, session.Range{})
	if err != nil {
		s.fail(w, r, err)
		return session.Session{}, nil, false
	}
	return sess, evs, true
}

// transcriptOptions are the options of sess's transcript (of events evs) as r asks, with the
// memory notes its turns were offered.
func (s *server) transcriptOptions(r *http.Request, sess session.Session, evs []session.Event) (transcript.Options, error) {
	notes, err := s.cfg.Sessions.NotesByID(r.Context(), sess.Key.Team, sess.Key.Channel, transcript.NoteIDs(evs))
	if err != nil {
		return transcript.Options{}, err
	}
	forks, err := s.cfg.Sessions.Forks(r.Context(), sess.ID)
	if err != nil {
		return transcript.Options{}, err
	}
	q := r.URL.Query()
	return transcript.Options{
		Forks:         forks,
		Notes:         notes,
		All:           q.Get("all") == "1",
		RevealDeleted: q.Get("deleted") == "1" && identityFrom(r.Context()).Auditor,
		Location:      s.location(r),
		Permalink:     s.cfg.Finder.Permalink(sess.Key.Channel, sess.Key.ThreadTS, ""),
		ChannelName:   s.channelName(r.Context(), sess.Key.Channel),
	}, nil
}

func (s *server) view(w http.ResponseWriter, r *http.Request) {
	sess, evs, ok := s.load(w, r, access{action: "view"})
	if !ok {
		return
	}
	opts, err := s.transcriptOptions(r, sess, evs)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if s.cfg.Files != nil {
		opts.FileURL = func(sha string) string { return fileURL(sess.ID, sha) }
	}
	t := transcript.Build(sess, evs, opts)
	body, err := t.HTMLFragment()
	if err != nil {
		s.fail(w, r, err)
		return
	}
	q := url.Values{}
	if opts.All {
		q.Set("all", "1")
	}
	if opts.RevealDeleted {
		q.Set("deleted", "1")
	}
	if tz := r.URL.Query().Get("tz"); tz != "" {
		q.Set("tz", tz)
	}
	data := pageData{Title: t.Heading(), Transcript: body, Session: sess.ID.String(), All: opts.All,
		Revealed: opts.RevealDeleted, Auditor: identityFrom(r.Context()).Auditor, Query: q.Encode()}
	s.respond(w, r, "transcript", data, access{action: "view", session: sess.ID, results: len(t.Entries)})
}

var contentTypes = map[transcript.Format]string{
	transcript.FormatText:     "text/plain; charset=utf-8",
	transcript.FormatMarkdown: "text/markdown; charset=utf-8",
	transcript.FormatHTML:     "text/html; charset=utf-8",
	transcript.FormatJSON:     "application/json",
}

var extensions = map[transcript.Format]string{
	transcript.FormatText: "txt", transcript.FormatMarkdown: "md", transcript.FormatHTML: "html", transcript.FormatJSON: "json",
}

func (s *server) download(w http.ResponseWriter, r *http.Request) {
	f, err := transcript.ParseFormat(r.URL.Query().Get("format"))
	if err != nil {
		s.page(w, http.StatusBadRequest, "message", pageData{Title: "Unknown format", Message: err.Error()})
		return
	}
	sess, evs, ok := s.load(w, r, access{action: "download"})
	if !ok {
		return
	}
	opts, err := s.transcriptOptions(r, sess, evs)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	opts.Format = f
	var b bytes.Buffer
	if err := transcript.Render(&b, sess, evs, opts); err != nil {
		s.fail(w, r, err)
		return
	}
	if err := record(r.Context(), s.cfg.AccessLog, r, access{action: "download", session: sess.ID, format: string(f), status: http.StatusOK}); err != nil {
		s.unrecorded(w, err)
		return
	}
	w.Header().Set("Content-Type", contentTypes[f])
	w.Header().Set("Content-Disposition", fmt.Sprintf(`attachment; filename="logbook-%s.%s"`, sess.ID, extensions[f]))
	w.Write(b.Bytes()) //nolint:errcheck // the client went away
}

type hitRow struct {
	search.Hit
	When        string
	Who         string
	Snippet     template.HTML
	ChannelName string
	FromSession bool // a note the agent wrote in a session
}

// kindOption is a choice of the search form's Kind.
type kindOption struct {
	Value, Label string
	Selected     bool
}

// kindOptions are the search form's kinds, kind selected.
func kindOptions(kind string) []kindOption {
	opts := []kindOption{{search.KindAll, "Messages and notes", false}, {search.KindMessages, "Messages", false}, {search.KindNotes, "Memory notes", false}}
	for i := range opts {
		opts[i].Selected = opts[i].Value == kind
	}
	return opts
}

// searchVisible runs q for the search page and returns the page and the hits its viewer may
// see (hits in private channels are hidden from non-auditors), at most DefaultLimit.
//
// A first page asks for one hit more than it shows (room for one hidden hit), not for twice
// as many: a search costs more with every match it ranks. Only when hits were hidden and the
// page came back full (more may be visible below) does it ask again, with room for twice the
// hits it shows. A page that goes on (More) asks for what it shows and shows every visible
// hit it got, since the next page starts after all of them.
func (s *server) searchVisible(ctx context.Context, q search.Query) (search.Page, []search.Hit, error) {
	limit := search.DefaultLimit
	q.Limit = limit + 1
	if q.After != "" {
		q.Limit = limit
	}
	for retried := false; ; retried = true {
		page, err := s.cfg.Finder.SearchPage(ctx, q)
		if err != nil {
			return page, nil, err
		}
		show := limit
		if page.More != "" {
			show = len(page.Hits) // every visible hit: the next page starts after them all
		}
		var hits []search.Hit
		hidden := false
		for _, h := range page.Hits {
			if s.hidden(ctx, h.Channel) {
				hidden = true
				continue
			}
			if len(hits) < show {
				hits = append(hits, h)
			}
		}
		if retried || !hidden || q.After != "" || page.More != "" || len(page.Hits) < q.Limit || len(hits) >= limit {
			return page, hits, nil
		}
		q.Limit = min(2*limit, search.MaxLimit)
	}
}

func (s *server) search(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	v := r.URL.Query()
	data := pageData{Title: "Search", Q: v.Get("q"), Actor: v.Get("actor"), Channel: v.Get("channel"),
		Since: v.Get("since"), Until: v.Get("until"), Kind: cmp.Or(v.Get("kind"), search.KindAll), Searched: v.Has("q")}
	data.Kinds = kindOptions(data.Kind)
	if !data.Searched {
		s.page(w, http.StatusOK, "search", data)
		return
	}
	q := search.Query{Text: data.Q, Actor: data.Actor, Channel: data.Channel, Kind: data.Kind, After: v.Get("after")}
	var err error
	if q.Since, err = parseDay(data.Since, false); err != nil {
		data.Message = "“Since” is not a date (YYYY-MM-DD)."
	}
	if q.Until, err = parseDay(data.Until, true); err != nil {
		data.Message = "“Until” is not a date (YYYY-MM-DD)."
	}
	if data.Message == "" {
		page, hits, err := s.searchVisible(ctx, q)
		var qe *search.QueryError
		switch {
		case errors.Is(err, search.ErrEmptyQuery):
			data.Message = "Type some words to search for."
		case errors.As(err, &qe):
			data.Message = "Cannot search for that: " + qe.Reason + "."
		case err != nil:
			s.fail(w, r, err)
			return
		}
		if page.More != "" {
			next := r.URL.Query()
			next.Set("after", page.More)
			data.More = "/search?" + next.Encode()
		}
		loc := s.location(r)
		for _, h := range hits {
			who := cmp.Or(h.ActorName, h.ActorID)
			if h.ActorKind == "bot" {
				who = "logbook"
			}
			data.Hits = append(data.Hits, hitRow{Hit: h, When: s.formatTime(h.CreatedAt, loc), Who: who, Snippet: snippetHTML(h.Snippet),
				ChannelName: s.channelName(ctx, h.Channel), FromSession: h.SessionID != (session.ID{})})
		}
	}
	logged := data.Q
	kind := data.Kind
	if kind == search.KindAll {
		kind = "" // the default, not logged
	}
	for _, f := range []struct{ k, v string }{{"actor", data.Actor}, {"channel", data.Channel}, {"since", data.Since}, {"until", data.Until}, {"kind", kind}} {
		if f.v != "" {
			logged += " " + f.k + ":" + f.v
		}
	}
	s.respond(w, r, "search", data, access{action: "search", query: logged, results: len(data.Hits)})
}

func snippetHTML(spans []search.Span) template.HTML {
	var b strings.Builder
	for _, sp := range spans {
		if sp.Match {
			b.WriteString("<mark>" + template.HTMLEscapeString(sp.Text) + "</mark>")
		} else {
			b.WriteString(template.HTMLEscapeString(sp.Text))
		}
	}
	return template.HTML(b.String())
}

// parseDay reads a YYYY-MM-DD date as the start of that day in UTC (end: the next day's start).
func parseDay(s string, end bool) (time.Time, error) {
	if strings.TrimSpace(s) == "" {
		return time.Time{}, nil
	}
	t, err := time.Parse("2006-01-02", strings.TrimSpace(s))
	if err != nil {
		return time.Time{}, err
	}
	if end {
		t = t.AddDate(0, 0, 1)
	}
	return t, nil
}

// respond renders a page, records the access, then sends the page.
func (s *server) respond(w http.ResponseWriter, r *http.Request, tmpl string, data pageData, a access) {
	var b bytes.Buffer
	data.Who = identityFrom(r.Context()).Who
	data.SignOut = identityFrom(r.Context()).browser
	if err := pages.ExecuteTemplate(&b, tmpl, data); err != nil {
		s.fail(w, r, err)
		return
	}
	a.status = http.StatusOK
	if err := record(r.Context(), s.cfg.AccessLog, r, a); err != nil {
		s.unrecorded(w, err)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Write(b.Bytes()) //nolint:errcheck // the client went away
}

func (s *server) notFound(w http.ResponseWriter, r *http.Request, a access) {
	a.status = http.StatusNotFound
	if err := record(r.Context(), s.cfg.AccessLog, r, a); err != nil {
		s.unrecorded(w, err)
		return
	}
	s.page(w, http.StatusNotFound, "message", pageData{Title: "Not found", Message: "There is no such session, or it is not visible to you."})
}

func (s *server) unrecorded(w http.ResponseWriter, err error) {
	s.log.Error().Err(err).Msg("access not recorded; page withheld")
	s.page(w, http.StatusServiceUnavailable, "message", pageData{Title: "Try again", Message: "This page cannot be shown right now because the access record could not be written. Please try again shortly."})
}

func (s *server) fail(w http.ResponseWriter, r *http.Request, err error) {
	if r.Context().Err() != nil {
		return
	}
	s.log.Error().Err(err).Str("path", r.URL.Path).Msg("serve page")
	s.page(w, http.StatusInternalServerError, "message", pageData{Title: "Something went wrong", Message: "The page could not be built. The error was logged."})
}

// page writes a page that shows no workspace content (messages, forms, errors).
func (s *server) page(w http.ResponseWriter, status int, tmpl string, data pageData) {
	var b bytes.Buffer
	if err := pages.ExecuteTemplate(&b, tmpl, data); err != nil {
		s.log.Error().Err(err).Str("template", tmpl).Msg("render page")
		http.Error(w, http.StatusText(http.StatusInternalServerError), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	w.Write(b.Bytes()) //nolint:errcheck // the client went away
}

type pageData struct {
	Title   string
	Who     string
	SignOut bool // signed in through a cookie: the nav has a sign-out button
	Message string
	// sign-in
	Problem   string
	TokenForm bool
	OIDCLogin string // the OIDC sign-in's start, "" when there is none
	Refresh   string // a meta refresh, "0;url=PATH" (after an OIDC sign-in)
	// list
	Sessions []sessionRow
	Next     string
	// transcript
	Transcript template.HTML
	Session    string
	All        bool
	Revealed   bool
	Auditor    bool
	Query      string
	// search
	Q, Actor, Channel, Since, Until string
	Kind                            string // search.KindAll, KindMessages or KindNotes
	Kinds                           []kindOption
	Searched                        bool
	Hits                            []hitRow
	More                            string // the next page of a cut search (search.Page.More)
	// usage (usage.go)
	Usage *usageData
	// schedules' and hooks' runs (automations.go)
	Automations *automationsData
	// a channel's settings (channelsettings.go)
	ChannelSettings *channelSettingsData
	// an eval record beside its original turn (eval.go)
	Eval *evalData
}

func (d pageData) With(key, value string) string {
	v, _ := url.ParseQuery(d.Query)
	if value == "" {
		v.Del(key)
	} else {
		v.Set(key, value)
	}
	if enc := v.Encode(); enc != "" {
		return "?" + enc
	}
	return ""
}

var pages = template.Must(template.New("pages").Funcs(template.FuncMap{
	"css":  func() template.CSS { return transcript.CSS + pageCSS },
	"itoa": strconv.Itoa,
	"usageSection": func(title string, ts []budget.Total) usageSection {
		return usageSection{Title: title, Totals: ts}
	},
}).Parse(pageTemplates + usageTemplate + automationsTemplate + channelSettingsTemplate + evalTemplate))
