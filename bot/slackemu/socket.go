package slackemu

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/gorilla/websocket"
)

// maxAckBytes is Slack's limit on a socket response: frames this large are dropped.
const maxAckBytes = 20 * 1024

// conn is one Socket Mode WebSocket. Its writer goroutine is the only one that
// writes frames; frames reach it through out.
type conn struct {
	id              int
	ws              *websocket.Conn
	out             chan []byte
	pongs           chan string   // PONG payloads owed to client PINGs, written by the writer
	quit            chan struct{} // closed when the socket is gone
	closed          bool          // guarded by Server.mu
	draining        bool          // guarded by Server.mu: sent `disconnect`, gets no new envelopes
	debugReconnects bool
	stalled         atomic.Bool // black hole: nothing is written or read
	pings, pongsIn  atomic.Int64
	openedAt        time.Time
}

// ConnInfo describes an open socket.
type ConnInfo struct {
	ID              int       `json:"id"`
	Draining        bool      `json:"draining"`
	Stalled         bool      `json:"stalled"`
	DebugReconnects bool      `json:"debug_reconnects"`
	Pings           int64     `json:"pings"`
	Pongs           int64     `json:"pongs"`
	OpenedAt        time.Time `json:"opened_at"`
}

// sendLocked queues frame for the writer. A socket whose queue is full is closed
// (its envelopes are then retried, as Slack does for a dead socket).
func (c *conn) sendLocked(frame []byte) {
	if c.closed {
		return
	}
	select {
	case c.out <- frame:
	default:
		_ = c.ws.Close()
	}
}

// openConnection answers apps.connections.open: a single-use ticket on the socket URL.
func (s *Server) openConnectionLocked(r *http.Request) map[string]any {
	ticket := uuid.NewString()
	s.tickets[ticket] = true
	u := s.hostURL(r, "ws") + "/link/?" + url.Values{"ticket": {ticket}, "app_id": {s.opts.AppID}}.Encode()
	return map[string]any{"ok": true, "url": u}
}

func checkOrigin(r *http.Request) bool {
	origin := r.Header.Get("Origin")
	if origin == "" {
		return true
	}
	u, err := url.Parse(origin)
	if err != nil {
		return false
	}
	return u.Host == "api.slack.com" || u.Host == r.Host
}

// handleSocket upgrades a ticketed request to a Socket Mode connection.
func (s *Server) handleSocket(w http.ResponseWriter, r *http.Request) {
	ticket := r.URL.Query().Get("ticket")
	s.mu.Lock()
	valid := s.tickets[ticket]
	delete(s.tickets, ticket)
	s.mu.Unlock()
	if !valid {
		http.Error(w, "invalid or already used ticket", http.StatusUnauthorized)
		return
	}
	up := websocket.Upgrader{CheckOrigin: checkOrigin}
	ws, err := up.Upgrade(w, r, nil)
	if err != nil {
		s.log.Debug().Err(err).Msg("websocket upgrade")
		return
	}
	c := &conn{
		ws: ws, out: make(chan []byte, 1024), pongs: make(chan string, 1), quit: make(chan struct{}), openedAt: time.Now(),
		debugReconnects: r.URL.Query().Get("debug_reconnects") == "true",
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		_ = ws.Close()
		return
	}
	s.connSeq++
	c.id = s.connSeq
	s.conns[c.id] = c
	s.opened++
	connTime := 18060
	if c.debugReconnects {
		connTime = 360
	}
	hello, _ := json.Marshal(map[string]any{
		"type": "hello", "num_connections": len(s.conns),
		"debug_info":      map[string]any{"host": "applink-emu-1", "build_number": 1, "approximate_connection_time": connTime},
		"connection_info": map[string]any{"app_id": s.opts.AppID},
	})
	c.sendLocked(hello)
	s.wg.Add(2)
	s.notifyLocked()
	s.mu.Unlock()
	s.log.Debug().Int("conn_id", c.id).Msg("socket open")

	go s.writeLoop(c)
	go s.readLoop(c)
}

// writeLoop is the only writer of c: queued frames and PING control frames.
func (s *Server) writeLoop(c *conn) {
	defer s.wg.Done()
	ping := time.NewTicker(s.opts.PingInterval)
	defer ping.Stop()
	write := func(kind int, data []byte) bool {
		if c.stalled.Load() {
			return true
		}
		_ = c.ws.SetWriteDeadline(time.Now().Add(10 * time.Second))
		if err := c.ws.WriteMessage(kind, data); err != nil {
			_ = c.ws.Close()
			return false
		}
		return true
	}
	for {
		select {
		case <-c.quit:
			return
		case frame := <-c.out:
			if !write(websocket.TextMessage, frame) {
				return
			}
		case data := <-c.pongs:
			if !write(websocket.PongMessage, []byte(data)) {
				return
			}
		case <-ping.C:
			if !write(websocket.PingMessage, []byte("emu")) {
				return
			}
			if !c.stalled.Load() {
				c.pings.Add(1)
			}
		}
	}
}

// readLoop reads acks from c until the socket fails, then removes c.
func (s *Server) readLoop(c *conn) {
	defer s.wg.Done()
	defer s.dropConn(c)
	// Client PINGs (slack-go sends none) are answered by the writer, keeping it the only writer.
	c.ws.SetPingHandler(func(data string) error {
		select {
		case c.pongs <- data:
		default: // a PONG is already owed; one answer covers both
		}
		return nil
	})
	c.ws.SetPongHandler(func(string) error {
		c.pongsIn.Add(1)
		s.mu.Lock()
		s.notifyLocked()
		s.mu.Unlock()
		return nil
	})
	for {
		_, data, err := c.ws.ReadMessage()
		if err != nil {
			return
		}
		if c.stalled.Load() {
			continue
		}
		var ack struct {
			EnvelopeID string          `json:"envelope_id"`
			Payload    json.RawMessage `json:"payload"`
		}
		if len(data) >= maxAckBytes || json.Unmarshal(data, &ack) != nil || ack.EnvelopeID == "" {
			s.mu.Lock()
			s.badFrames = capped(append(s.badFrames, data), s.opts.RecordLimit)
			s.notifyLocked()
			s.mu.Unlock()
			continue
		}
		s.mu.Lock()
		s.ackLocked(c, ack.EnvelopeID, ack.Payload)
		s.mu.Unlock()
	}
}

func (s *Server) dropConn(c *conn) {
	s.mu.Lock()
	if !c.closed {
		c.closed = true
		delete(s.conns, c.id)
		close(c.quit)
		s.notifyLocked()
	}
	s.mu.Unlock()
	_ = c.ws.Close()
	s.log.Debug().Int("conn_id", c.id).Msg("socket closed")
}

// pickConnLocked returns one of the open, non-draining sockets, at random, as Slack does ("the
// Slack API server will send each event to only 1 random connection", bolt-python#448). Round
// robin locked in step with a test's traffic: with three sockets and three envelopes a thread
// (a mention's message and app_mention, the bot's reply), every mention's pair went to the same
// two sockets, and the third never saw one. The sequence is seeded, the same for every run.
func (s *Server) pickConnLocked() *conn {
	ids := make([]int, 0, len(s.conns))
	for id, c := range s.conns {
		if !c.draining {
			ids = append(ids, id)
		}
	}
	if len(ids) == 0 {
		return nil
	}
	slices.Sort(ids)
	return s.conns[ids[s.pick.IntN(len(ids))]]
}

// ErrNoConnection is returned when a socket operation names no open socket.
var ErrNoConnection = errors.New("slackemu: no such open socket")

// connLocked returns socket id; id 0 means the oldest socket still getting
// envelopes (not draining), else the oldest open one.
func (s *Server) connLocked(id int) (*conn, error) {
	if id == 0 {
		var best *conn
		for _, c := range s.conns {
			if best == nil || (best.draining && !c.draining) || (best.draining == c.draining && c.id < best.id) {
				best = c
			}
		}
		if best == nil {
			return nil, fmt.Errorf("oldest socket: %w", ErrNoConnection)
		}
		return best, nil
	}
	c := s.conns[id]
	if c == nil {
		return nil, fmt.Errorf("socket %d: %w", id, ErrNoConnection)
	}
	return c, nil
}

// Disconnect sends {"type":"disconnect","reason":reason} on socket id (0 = the
// oldest socket not already draining). reason is "warning", "refresh_requested" or "link_disabled".
// The socket gets no new envelopes and is closed after Options.DisconnectGrace.
func (s *Server) Disconnect(id int, reason string) error {
	switch reason {
	case "warning", "refresh_requested", "link_disabled":
	default:
		return fmt.Errorf("disconnect reason %q: want warning, refresh_requested or link_disabled", reason)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	c, err := s.connLocked(id)
	if err != nil {
		return err
	}
	frame, _ := json.Marshal(map[string]any{"type": "disconnect", "reason": reason, "debug_info": map[string]any{"host": "applink-emu-1"}})
	c.sendLocked(frame)
	c.draining = true
	s.afterFunc(s.opts.DisconnectGrace, func() { _ = c.ws.Close() })
	s.notifyLocked()
	return nil
}

// DisconnectAll sends `disconnect` with reason to every open socket and returns how many.
func (s *Server) DisconnectAll(reason string) (int, error) {
	s.mu.Lock()
	ids := make([]int, 0, len(s.conns))
	for id := range s.conns {
		ids = append(ids, id)
	}
	s.mu.Unlock()
	for _, id := range ids {
		if err := s.Disconnect(id, reason); err != nil && !errors.Is(err, ErrNoConnection) {
			return 0, err
		}
	}
	return len(ids), nil
}

// DropConnection closes socket id's TCP connection without a close frame (0 = the oldest non-draining socket).
func (s *Server) DropConnection(id int) error {
	s.mu.Lock()
	c, err := s.connLocked(id)
	s.mu.Unlock()
	if err != nil {
		return err
	}
	return c.ws.Close()
}

// Stall turns socket id (0 = the oldest non-draining socket) into a black hole: it stays open but no frame,
// PING included, is written and incoming frames are ignored, like a dead TCP path
// without FIN. slack-go's ping watchdog should then reconnect. Deliveries routed to
// it are lost and retried.
func (s *Server) Stall(id int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, err := s.connLocked(id)
	if err != nil {
		return err
	}
	c.stalled.Store(true)
	c.draining = true
	s.notifyLocked()
	return nil
}

// SendRaw writes frame as a text message on socket id (0 = the oldest non-draining socket), unvalidated;
// for malformed-envelope tests.
func (s *Server) SendRaw(id int, frame []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, err := s.connLocked(id)
	if err != nil {
		return err
	}
	c.sendLocked(slices.Clone(frame))
	return nil
}

// Connections lists the open sockets, oldest first.
func (s *Server) Connections() []ConnInfo {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]ConnInfo, 0, len(s.conns))
	for _, c := range s.conns {
		out = append(out, ConnInfo{
			ID: c.id, Draining: c.draining, Stalled: c.stalled.Load(), DebugReconnects: c.debugReconnects,
			Pings: c.pings.Load(), Pongs: c.pongsIn.Load(), OpenedAt: c.openedAt,
		})
	}
	slices.SortFunc(out, func(a, b ConnInfo) int { return a.ID - b.ID })
	return out
}

// ConnectionsOpened counts every socket ever opened (reconnects included).
func (s *Server) ConnectionsOpened() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.opened
}

// BadFrames returns the frames received that were not acks (malformed JSON, no
// envelope_id, or ≥ 20 KB, which Slack drops).
func (s *Server) BadFrames() [][]byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([][]byte, len(s.badFrames))
	for i, f := range s.badFrames {
		out[i] = slices.Clone(f)
	}
	return out
}
