package slackemu

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/rs/zerolog"
)

// ErrClosed is returned by waits and driver calls on a closed Server.
var ErrClosed = errors.New("slackemu: server closed")

// Server is a running emulated Slack workspace: the Web API under /api/, Socket Mode
// WebSockets under /link/, slash-command response URLs under /commands/, file downloads
// under /files-pri/, upload URLs under /upload/v1/ and the JSON control surface under /_emu/. Create it with Start; stop it with Close.
// All methods are safe for concurrent use.
type Server struct {
	opts Options
	log  zerolog.Logger
	ln   net.Listener
	http *http.Server
	wg   sync.WaitGroup // every goroutine the server starts
	done chan struct{}  // closed by Close

	mu      sync.Mutex
	closed  bool
	changed chan struct{} // closed and replaced on every state change

	// workspace
	users        map[string]*User
	usergroups   map[string]*UserGroup // by id (usergroups.go)
	channels     map[string]*channelState
	channelOrder []string
	subs         map[string]bool
	lastMicro    int64
	eventSeq     int
	fileSeq      int
	clientMsgSeq int
	dirty        bool // the workspace changed since it was last saved to Options.StateFile

	// socket mode
	tickets   map[string]bool
	conns     map[int]*conn
	connSeq   int
	opened    int
	pick      *rand.Rand // which open socket gets an envelope (pickConnLocked)
	byEvent   map[string]*delivery
	envelopes map[string]*delivery
	delivLog  []Delivery
	acks      []Ack
	badFrames [][]byte
	dfaults   []*DeliveryFault
	settled   []string // event ids of acked or failed deliveries, oldest first

	// web api
	mfaults    []*MethodFault
	limits     map[string]RateLimit
	buckets    map[string]*bucket
	calls      map[string]int
	requests   []Request
	ephemerals []Ephemeral
	statuses   map[string]string
	titles     map[string]string // channel/thread_ts → title (assistant.threads.setTitle, agents.sessions.*)
	// agentSessions maps channel/thread_ts to the agent session's status; agentHistory to
	// every status it was given, in order.
	agentSessions map[string]string
	agentHistory  map[string][]string
	// loadingMessages maps channel/thread_ts to assistant.threads.setStatus' loading_messages.
	loadingMessages map[string][]string
	// streams maps channel/ts to a streamed message's state; streamOrder holds their keys
	// in start order.
	streams   map[string]*streamState
	homeViews map[string]*homeView // user id → the App Home view published for them (views.publish)
	// codeChannels are the code channels made (agents.conversations.*, agents.go).
	codeChannels codeChannelsState
	streamOrder  []string
	// streamsEnded counts the leading streamOrder entries known to be over: expiry looks
	// only at the streams after them, so a long run's readers do not walk every stream ever.
	streamsEnded int
	// touched holds, in order, every insertion of a message and every change of its text
	// (ChangedSince reads it): a test watching for replies reads what changed, not the
	// whole history, a few dozen times a second; and every deletion, with the message as it
	// was then in gone (a deleted ts is never used again).
	touched   []msgRef
	gone      map[msgRef]Message
	slashSeq  int
	responses map[string]*responseURL

	// files: the store (by id, fileOrder in creation order), upload URL tokens → file ids,
	// served downloads and download attempts per file id, and injected download faults.
	files      map[string]*fileState
	fileOrder  []string
	uploads    map[string]string
	downloads  map[string]int
	dlAttempts map[string]int
	dlfaults   []*downloadFault
}

// Start listens on opts.Addr and serves the emulator until Close.
func Start(opts Options) (*Server, error) {
	opts = opts.withDefaults()
	ln, err := net.Listen("tcp", opts.Addr)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", opts.Addr, err)
	}
	s := &Server{
		opts:      opts,
		log:       opts.Logger.With().Str("component", "slackemu").Logger(),
		ln:        ln,
		done:      make(chan struct{}),
		changed:   make(chan struct{}),
		users:     map[string]*User{},
		channels:  map[string]*channelState{},
		subs:      map[string]bool{},
		tickets:   map[string]bool{},
		conns:     map[int]*conn{},
		pick:      rand.New(rand.NewPCG(7461, 1)),
		byEvent:   map[string]*delivery{},
		envelopes: map[string]*delivery{},
		limits:    map[string]RateLimit{},
		buckets:   map[string]*bucket{},
		calls:     map[string]int{},
		statuses:  map[string]string{},
		titles:    map[string]string{}, agentSessions: map[string]string{},
		agentHistory: map[string][]string{}, loadingMessages: map[string][]string{},
		streams:   map[string]*streamState{},
		responses: map[string]*responseURL{},
		files:     map[string]*fileState{}, uploads: map[string]string{},
		downloads: map[string]int{}, dlAttempts: map[string]int{},
	}
	s.users[opts.BotUserID] = &User{ID: opts.BotUserID, Name: opts.BotName, RealName: opts.BotName, IsBot: true, BotID: opts.BotID, TZ: "UTC"}
	for _, u := range opts.Users {
		s.users[u.ID] = &u
	}
	for _, c := range opts.Channels {
		s.addChannelLocked(c)
	}
	for _, sub := range opts.Subscriptions {
		s.subs[sub] = true
	}
	for m, l := range opts.RateLimits {
		s.limits[m] = l
	}
	if opts.StateFile != "" {
		// Load, then save at once: a file that cannot be written fails Start, not a later post.
		if err := s.loadState(opts.StateFile); err != nil {
			ln.Close()
			return nil, err
		}
		if err := s.saveLocked(); err != nil {
			ln.Close()
			return nil, err
		}
	}

	// Slack's endpoints (Web API, Socket Mode, response_url, files), not the web pages' routes they resemble.
	mux := http.NewServeMux()
	mux.HandleFunc("/api/", s.handleAPI)
	mux.HandleFunc("/link/", s.handleSocket)
	mux.HandleFunc("/commands/", s.handleResponseURL)
	mux.HandleFunc("/files-pri/", s.handleFileDownload)
	mux.HandleFunc("/upload/v1/", s.handleUpload)
	mux.HandleFunc("/signin", s.handleSignin)
	s.registerControl(mux)
	s.http = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	s.wg.Go(func() {
		if err := s.http.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error().Err(err).Msg("serve")
		}
	})
	s.log.Info().Str("api_url", s.APIURL()).Msg("slack emulator listening")
	return s, nil
}

// Run starts an emulator with opts, blocks until ctx is done, then closes it.
// It is what `logbook slack-emulator --addr` runs. ready, if not nil, is called
// once the server listens (e.g. to print APIURL and the tokens for the user).
func Run(ctx context.Context, opts Options, ready func(*Server)) error {
	s, err := Start(opts)
	if err != nil {
		return err
	}
	if ready != nil {
		ready(s)
	}
	<-ctx.Done()
	s.Close()
	return nil
}

// Close stops serving, closes every socket, stops every timer and waits for all
// goroutines the server started. It is idempotent (the same mutex-guarded once as
// pgtest.Proxy.Close: two test fixtures in packages that share nothing else).
func (s *Server) Close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	close(s.done)
	for _, d := range s.byEvent {
		if d.timer != nil {
			d.timer.Stop()
		}
	}
	conns := make([]*conn, 0, len(s.conns))
	for _, c := range s.conns {
		conns = append(conns, c)
	}
	s.notifyLocked()
	s.mu.Unlock()

	_ = s.http.Close()
	for _, c := range conns {
		_ = c.ws.Close()
	}
	s.wg.Wait()
}

// URL is the server's base URL, e.g. "http://127.0.0.1:41234".
func (s *Server) URL() string { return "http://" + s.ln.Addr().String() }

// APIURL is the Web API base for slack.OptionAPIURL / SLACK_API_URL; it ends with "/".
func (s *Server) APIURL() string { return s.URL() + "/api/" }

// BotToken is the bot token (xoxb-) the Web API accepts.
func (s *Server) BotToken() string { return s.opts.BotToken }

// AppToken is the app-level token (xapp-) apps.connections.open accepts.
func (s *Server) AppToken() string { return s.opts.AppToken }

// BotUserID, BotID, AppID and TeamID identify the emulated app and workspace.
func (s *Server) BotUserID() string { return s.opts.BotUserID }

// BotID is the bot id (B…) carried by the bot's posts.
func (s *Server) BotID() string { return s.opts.BotID }

// AppID is the app id (A…).
func (s *Server) AppID() string { return s.opts.AppID }

// TeamID is the workspace id (T…).
func (s *Server) TeamID() string { return s.opts.TeamID }

// Wait blocks until cond returns true, re-evaluating it after every state change
// of the server (post, delivery, ack, connection, API call). cond must not block;
// it may call the Server's methods. It returns ctx.Err() or ErrClosed otherwise.
func (s *Server) Wait(ctx context.Context, cond func() bool) error {
	for {
		s.mu.Lock()
		ch, closed := s.changed, s.closed
		s.mu.Unlock()
		if cond() {
			return nil
		}
		if closed {
			return ErrClosed
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// notifyLocked saves the workspace when Options.StateFile asks for it and it changed, then
// wakes every Wait. Callers hold s.mu.
func (s *Server) notifyLocked() {
	s.persistLocked()
	close(s.changed)
	s.changed = make(chan struct{})
}

// afterFunc runs f after d on a goroutine the server owns; f does not run once
// Close has begun. f must take s.mu itself.
func (s *Server) afterFunc(d time.Duration, f func()) *time.Timer {
	return time.AfterFunc(d, func() {
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			return
		}
		s.wg.Add(1)
		s.mu.Unlock()
		defer s.wg.Done()
		f()
	})
}

// hostURL returns scheme://host for links handed to clients, preferring the Host
// the client used so the emulator works behind other names than 127.0.0.1.
func (s *Server) hostURL(r *http.Request, scheme string) string {
	host := r.Host
	if host == "" {
		host = s.ln.Addr().String()
	}
	return (&url.URL{Scheme: scheme, Host: host}).String()
}
