// Package peerwake carries a session's wake from one replica to the one replica that runs it,
// over HTTP, so that no other replica is woken (issue 53). PostgreSQL's NOTIFY, the other
// way, signals every backend that LISTENs in the database whatever the channel, and each
// reads the queue in a transaction of its own: at ten replicas a routed follow-up cost ten
// transactions, at fifty, fifty.
//
// A replica that sets LOGBOOK_PEER_ADDR has an Inbox: a random bearer token and the address
// peers reach its HTTP server at, which the runner records (session.Store.RecordPeer) while
// it holds its liveness claim. A sender finds a session's owner with its address and token in
// one statement (session.Store.NotifyOwner) and posts the wake with a Sender; when the post
// fails, it NOTIFYs the owner as before. A wake carries no authority: the receiver reads the
// session's pending work from the log as it does for a NOTIFY. The token keeps anything else
// that can reach the port (a sandbox on the host, a neighbour) from making replicas read.
package peerwake

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/logbook/logbook/session"
)

// Path is where a replica's HTTP server takes wakes (POST).
const Path = "/internal/wake"

// maxBody bounds a wake's body: a session id, a space and the sender's name.
const maxBody = 512

// Inbox takes the wakes peers post to this replica: it hands each to the function Attach
// gave it. Its token is a secret: it is never logged.
type Inbox struct {
	addr  string
	token string

	mu      sync.RWMutex
	deliver func(id session.ID, sender string)
}

// NewInbox returns the inbox of a replica that peers reach at addr (host:port), with a new
// random token.
func NewInbox(addr string) (*Inbox, error) {
	if host, port, err := net.SplitHostPort(addr); err != nil || host == "" || port == "" || strings.ContainsAny(addr, "/?#@ ") {
		return nil, fmt.Errorf("peer address %q: want host:port", addr)
	}
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return nil, fmt.Errorf("make a wake token: %w", err)
	}
	return &Inbox{addr: addr, token: hex.EncodeToString(b)}, nil
}

// Addr is where peers reach this replica (host:port).
func (in *Inbox) Addr() string { return in.addr }

// Token is the bearer token a wake must carry.
func (in *Inbox) Token() string { return in.token }

// Attach makes deliver the receiver of every accepted wake from now on; until it is called
// the handler answers 503 (the sender falls back to NOTIFY).
func (in *Inbox) Attach(deliver func(id session.ID, sender string)) {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.deliver = deliver
}

// Handler takes POST Path: 204 once the wake is delivered, 401 without the token, 400 for
// a body that is not "<session id> <sender>", 503 before Attach.
func (in *Inbox) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			http.Error(w, "POST only", http.StatusMethodNotAllowed)
			return
		}
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || subtle.ConstantTimeCompare([]byte(got), []byte(in.token)) != 1 {
			http.Error(w, "a wake needs this replica's token", http.StatusUnauthorized)
			return
		}
		body, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
		if err != nil || len(body) > maxBody {
			http.Error(w, "a wake is a session id and a sender's name", http.StatusBadRequest)
			return
		}
		sid, sender, _ := strings.Cut(string(body), " ")
		id, err := session.ParseID(sid)
		if err != nil {
			http.Error(w, "a wake is a session id and a sender's name", http.StatusBadRequest)
			return
		}
		in.mu.RLock()
		deliver := in.deliver
		in.mu.RUnlock()
		if deliver == nil {
			http.Error(w, "not running sessions yet", http.StatusServiceUnavailable)
			return
		}
		deliver(id, sender)
		w.WriteHeader(http.StatusNoContent)
	})
}

// ErrPeerDown: a post to this address failed a moment ago; the sender does not try it again
// for a while (SenderOptions.Rest, doubling with each failure in a row up to MaxRest), so a
// replica that cannot be reached costs one timeout now and then, not one per wake.
var ErrPeerDown = errors.New("the peer's wake address failed a moment ago")

// SenderOptions tunes a Sender; zero values take defaults.
type SenderOptions struct {
	// Timeout bounds one post (default 1 s).
	Timeout time.Duration
	// Rest is how long an address that failed is not tried (default 10 s); it doubles with
	// each failure in a row, up to MaxRest (default 5 min).
	Rest, MaxRest time.Duration
	// Now is the clock of Rest (nil: time.Now).
	Now func() time.Time
	// Transport carries the posts (nil: a transport of the Sender's own).
	Transport http.RoundTripper
}

// Sender posts wakes to peers, over connections it keeps open.
type Sender struct {
	client        *http.Client
	rest, maxRest time.Duration
	now           func() time.Time

	mu     sync.Mutex
	failed map[string]down // address → its failures in a row
}

// down is an address's failures in a row: the last one's time, and how long it rests.
type down struct {
	at   time.Time
	rest time.Duration
}

// NewSender returns a Sender.
func NewSender(o SenderOptions) *Sender {
	if o.Timeout <= 0 {
		o.Timeout = time.Second
	}
	if o.Rest <= 0 {
		o.Rest = 10 * time.Second
	}
	if o.MaxRest < o.Rest {
		o.MaxRest = max(5*time.Minute, o.Rest)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Transport == nil {
		// Peers only: no proxy from the environment, a few kept connections per peer.
		o.Transport = &http.Transport{
			DialContext:         (&net.Dialer{Timeout: o.Timeout, KeepAlive: 30 * time.Second}).DialContext,
			MaxIdleConnsPerHost: 4,
			IdleConnTimeout:     90 * time.Second,
		}
	}
	return &Sender{client: &http.Client{Transport: o.Transport, Timeout: o.Timeout,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }},
		rest: o.Rest, maxRest: o.MaxRest, now: o.Now, failed: map[string]down{}}
}

// Send posts session id's wake, from sender, to the replica at addr with its token. An error
// means the wake may not have arrived: the caller signals the replica another way. An error
// that is not ErrPeerDown is the first of the address's failures since it last rested: the
// one worth saying.
func (s *Sender) Send(ctx context.Context, addr, token string, id session.ID, sender string) error {
	s.mu.Lock()
	d, isDown := s.failed[addr]
	if isDown && s.now().Sub(d.at) < d.rest {
		s.mu.Unlock()
		return ErrPeerDown
	}
	s.mu.Unlock()
	err := s.post(ctx, addr, token, id, sender)
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case err == nil:
		delete(s.failed, addr)
	case ctx.Err() == nil:
		now, rest := s.now(), s.rest
		if isDown {
			rest = min(d.rest*2, s.maxRest)
		}
		s.failed[addr] = down{at: now, rest: rest}
		for a, f := range s.failed { // addresses of replicas long gone (pods come and go)
			if now.Sub(f.at) > f.rest+time.Hour {
				delete(s.failed, a)
			}
		}
	}
	return err
}

func (s *Sender) post(ctx context.Context, addr, token string, id session.ID, sender string) error {
	// The address comes from the database: only a host and a port make a URL here.
	host, port, err := net.SplitHostPort(addr)
	if err != nil || host == "" || port == "" || strings.ContainsAny(addr, "/?#@ ") {
		return fmt.Errorf("wake %q: not a host:port", addr)
	}
	u := url.URL{Scheme: "http", Host: net.JoinHostPort(host, port), Path: Path}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u.String(), strings.NewReader(id.String()+" "+sender))
	if err != nil {
		return fmt.Errorf("wake %s: %w", addr, err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "text/plain")
	resp, err := s.client.Do(req)
	if err != nil {
		return fmt.Errorf("wake %s: %w", addr, err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096)) // the connection is kept
	if resp.StatusCode != http.StatusNoContent {
		return fmt.Errorf("wake %s: %s", addr, resp.Status)
	}
	return nil
}

// CloseIdle closes the connections kept to peers.
func (s *Sender) CloseIdle() { s.client.CloseIdleConnections() }
