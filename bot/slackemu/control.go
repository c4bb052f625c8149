package slackemu

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"
)

// maxControlWait bounds a control-surface long poll.
const maxControlWait = 5 * time.Minute

// registerControl mounts the JSON control surface under /_emu/. Every endpoint
// answers JSON; errors are {"ok":false,"error":"…"} with a 4xx status.
//
//	POST /_emu/post            Post                                  → Posted
//	POST /_emu/edit            {"channel","ts","text"}               → Posted
//	POST /_emu/delete          {"channel","ts"}                      → Posted
//	POST /_emu/join            {"channel","user"}                    → Posted
//	POST /_emu/slash           SlashCommand                          → SlashResult
//	GET  /_emu/thread?channel=&ts=                                   → {"messages":[Message]}
//	GET  /_emu/wait_replies?channel=&ts=&n=&timeout_ms=              → {"messages":[Message]} (bot replies; 408 on timeout)
//	GET  /_emu/acks | /_emu/deliveries | /_emu/connections | /_emu/ephemerals
//	GET  /_emu/calls?method=                                         → {"count":n,"requests":[Request]}
//	POST /_emu/disconnect      {"conn_id":0,"reason":"refresh_requested"} (conn_id 0 = every socket)
//	POST /_emu/drop_connection {"conn_id":0}
//	POST /_emu/raw             {"conn_id":0,"frame":"…"}
//	POST /_emu/method_fault    MethodFault
//	POST /_emu/delivery_fault  {"kind","delay_ms","event_type","times"}
//	POST /_emu/rate_limit      {"method","burst","every_ms","per_channel"}
//	POST /_emu/download_fault  {"file_id","status","times"}          (status 0 breaks the transfer half way)
//	POST /_emu/delete_file     {"file_id"}
//	GET  /_emu/file?id=                                              → {"file","content" (base64),"url","downloads","download_attempts"}
//	POST /_emu/clear_faults    {}
//	POST /_emu/fire_retries    {}                                    → {"fired":n}
func (s *Server) registerControl(mux *http.ServeMux) {
	c := controlMux{mux}
	s.controlWorkspace(c)
	s.controlSockets(c)
	s.controlFaults(c)
	s.controlReads(c)
}

// controlMux registers the control endpoints: JSON in (POST) or query parameters (GET), JSON
// out, errors as {"ok": false, "error": ...} with controlStatus's status.
type controlMux struct{ mux *http.ServeMux }

// post registers POST /_emu/path: in returns what the body decodes into (nil: no body).
func (c controlMux) post(path string, in func() any, do func(v any) (any, error)) {
	c.mux.HandleFunc("POST /_emu/"+path, func(w http.ResponseWriter, r *http.Request) {
		v := in()
		if v != nil {
			if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 10<<20)).Decode(v); err != nil {
				writeJSON(w, http.StatusBadRequest, fail("invalid JSON body: "+err.Error()))
				return
			}
		}
		c.reply(w)(do(v))
	})
}

// postJSON registers POST /_emu/path with a JSON body decoded into a new T, which do is given.
func postJSON[T any](c controlMux, path string, do func(*T) (any, error)) {
	c.post(path, func() any { return new(T) }, func(v any) (any, error) { return do(v.(*T)) })
}

// get registers GET /_emu/path.
func (c controlMux) get(path string, do func(r *http.Request) (any, error)) {
	c.mux.HandleFunc("GET /_emu/"+path, func(w http.ResponseWriter, r *http.Request) { c.reply(w)(do(r)) })
}

func (controlMux) reply(w http.ResponseWriter) func(out any, err error) {
	return func(out any, err error) {
		if err != nil {
			writeJSON(w, controlStatus(err), fail(err.Error()))
			return
		}
		writeJSON(w, http.StatusOK, out)
	}
}

// controlOK is the answer of a control call that returns nothing else.
var controlOK = map[string]any{"ok": true}

// controlWorkspace: what people do in the workspace (post, edit, delete, join, a slash command).
func (s *Server) controlWorkspace(c controlMux) {
	type msgRef struct {
		Channel string `json:"channel"`
		TS      string `json:"ts"`
		Text    string `json:"text"`
		User    string `json:"user"`
	}
	postJSON(c, "post", func(p *Post) (any, error) { return s.Post(*p) })
	postJSON(c, "edit", func(m *msgRef) (any, error) {
		return s.Edit(m.Channel, m.TS, m.Text)
	})
	postJSON(c, "delete", func(m *msgRef) (any, error) {
		return s.Delete(m.Channel, m.TS)
	})
	postJSON(c, "join", func(m *msgRef) (any, error) {
		return s.Join(m.Channel, m.User)
	})
	postJSON(c, "slash", func(sc *SlashCommand) (any, error) { return s.SlashCommand(*sc) })
}

// controlSockets: what happens to the Socket Mode connections.
func (s *Server) controlSockets(c controlMux) {
	type connRef struct {
		ConnID int    `json:"conn_id"`
		Reason string `json:"reason"`
		Frame  string `json:"frame"`
	}
	postJSON(c, "disconnect", func(r *connRef) (any, error) {
		if r.ConnID == 0 {
			n, err := s.DisconnectAll(r.Reason)
			return map[string]any{"ok": true, "sockets": n}, err
		}
		return controlOK, s.Disconnect(r.ConnID, r.Reason)
	})
	postJSON(c, "drop_connection", func(r *connRef) (any, error) {
		return controlOK, s.DropConnection(r.ConnID)
	})
	postJSON(c, "raw", func(r *connRef) (any, error) {
		return controlOK, s.SendRaw(r.ConnID, []byte(r.Frame))
	})
}

// controlFaults: Web API faults, delivery faults, rate limits and download faults, and their
// clearing.
func (s *Server) controlFaults(c controlMux) {
	postJSON(c, "method_fault", func(f *MethodFault) (any, error) {
		if f.Method == "" || (f.Error == "" && f.Status == 0 && !f.Drop) {
			return nil, errBadRequest("method and error, status or drop are required")
		}
		s.InjectMethodFault(*f)
		return controlOK, nil
	})
	type deliveryFaultJSON struct {
		Kind      FaultKind `json:"kind"`
		DelayMS   int       `json:"delay_ms"`
		EventType string    `json:"event_type"`
		Times     int       `json:"times"`
	}
	postJSON(c, "delivery_fault", func(f *deliveryFaultJSON) (any, error) {
		switch f.Kind {
		case FaultDrop, FaultDelay, FaultDuplicate:
		default:
			return nil, errBadRequest("kind must be drop, delay or duplicate")
		}
		s.InjectDeliveryFault(DeliveryFault{Kind: f.Kind, Delay: time.Duration(f.DelayMS) * time.Millisecond, EventType: f.EventType, Times: f.Times})
		return controlOK, nil
	})
	type rateLimitJSON struct {
		Method     string `json:"method"`
		Burst      int    `json:"burst"`
		EveryMS    int    `json:"every_ms"`
		PerChannel bool   `json:"per_channel"`
	}
	postJSON(c, "rate_limit", func(l *rateLimitJSON) (any, error) {
		if l.Method == "" {
			return nil, errBadRequest("method is required")
		}
		s.SetRateLimit(l.Method, RateLimit{Burst: l.Burst, Every: time.Duration(l.EveryMS) * time.Millisecond, PerChannel: l.PerChannel})
		return controlOK, nil
	})
	type fileRef struct {
		FileID string `json:"file_id"`
		Status int    `json:"status"`
		Times  int    `json:"times"`
	}
	postJSON(c, "download_fault", func(f *fileRef) (any, error) {
		s.InjectDownloadFault(f.FileID, f.Status, f.Times)
		return controlOK, nil
	})
	postJSON(c, "delete_file", func(r *fileRef) (any, error) {
		return controlOK, s.DeleteFile(r.FileID)
	})
	c.post("clear_faults", func() any { return nil }, func(any) (any, error) {
		s.ClearFaults()
		return controlOK, nil
	})
	c.post("fire_retries", func() any { return nil }, func(any) (any, error) {
		return map[string]any{"ok": true, "fired": s.FireRetries()}, nil
	})
}

// controlReads: what the emulator saw and holds (threads, acks, deliveries, connections,
// ephemeral messages, files, Web API calls).
func (s *Server) controlReads(c controlMux) {
	c.get("thread", func(r *http.Request) (any, error) {
		msgs, err := s.Thread(r.URL.Query().Get("channel"), r.URL.Query().Get("ts"))
		return map[string]any{"ok": true, "messages": msgs}, err
	})
	c.get("wait_replies", func(r *http.Request) (any, error) {
		q := r.URL.Query()
		n, _ := strconv.Atoi(q.Get("n"))
		ms, _ := strconv.Atoi(q.Get("timeout_ms"))
		timeout := min(maxControlWait, time.Duration(max(ms, 1))*time.Millisecond)
		if ms <= 0 {
			timeout = 10 * time.Second
		}
		ctx, cancel := context.WithTimeout(r.Context(), timeout)
		defer cancel()
		msgs, err := s.WaitForReplies(ctx, q.Get("channel"), q.Get("ts"), max(n, 1))
		return map[string]any{"ok": true, "messages": msgs}, err
	})
	c.get("acks", func(*http.Request) (any, error) { return map[string]any{"ok": true, "acks": s.Acks()}, nil })
	c.get("deliveries", func(*http.Request) (any, error) {
		return map[string]any{"ok": true, "deliveries": s.Deliveries()}, nil
	})
	c.get("connections", func(*http.Request) (any, error) {
		return map[string]any{"ok": true, "connections": s.Connections(), "opened": s.ConnectionsOpened()}, nil
	})
	c.get("ephemerals", func(*http.Request) (any, error) {
		return map[string]any{"ok": true, "ephemerals": s.Ephemerals()}, nil
	})
	c.get("file", func(r *http.Request) (any, error) {
		id := r.URL.Query().Get("id")
		f, found := s.UploadedFile(id)
		if !found {
			return nil, fmt.Errorf("file %s: %w", id, ErrNotFound)
		}
		return map[string]any{
			"ok": true, "file": f, "content": f.Content, "url": s.FileURL(id),
			"downloads": s.Downloads(id), "download_attempts": s.DownloadAttempts(id),
		}, nil
	})
	c.get("calls", func(r *http.Request) (any, error) {
		m := r.URL.Query().Get("method")
		return map[string]any{"ok": true, "count": s.Calls(m), "requests": s.Requests(m)}, nil
	})
}

type errBadRequest string

func (e errBadRequest) Error() string { return string(e) }

func controlStatus(err error) int {
	var bad errBadRequest
	switch {
	case errors.As(err, &bad):
		return http.StatusBadRequest
	case errors.Is(err, ErrNotFound), errors.Is(err, ErrNoConnection):
		return http.StatusNotFound
	case errors.Is(err, context.DeadlineExceeded):
		return http.StatusRequestTimeout
	default:
		return http.StatusConflict
	}
}
