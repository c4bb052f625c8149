package slackemu

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"time"
)

// maxHomeBlocks is the most blocks a Home tab view holds.
const maxHomeBlocks = 100

// homeView is the App Home view published for one person.
type homeView struct {
	id, hash string
	blocks   json.RawMessage
	n        int // views.publish calls that set it
}

// viewsPublish is views.publish, as Slack documents it: user_id and view (a JSON object whose
// type is "home", at most 100 blocks, checked as messages' blocks are) are required, else
// invalid_arguments; an unknown user is user_not_found; a hash that is not the view's current
// one is hash_conflict. The answer carries the view with its new hash.
func (s *Server) viewsPublish(_ *http.Request, p url.Values) map[string]any {
	user, raw := p.Get("user_id"), p.Get("view")
	invalid := func(msg string) map[string]any {
		e := fail("invalid_arguments")
		e["response_metadata"] = map[string]any{"messages": []string{"[ERROR] " + msg}}
		return e
	}
	if user == "" {
		return invalid("missing required field: user_id")
	}
	var view struct {
		Type   string          `json:"type"`
		Blocks json.RawMessage `json:"blocks"`
	}
	if raw == "" || json.Unmarshal([]byte(raw), &view) != nil {
		return invalid("missing required field: view")
	}
	if view.Type != "home" {
		return invalid("must be a home view [json-pointer:/view/type]")
	}
	var blocks []json.RawMessage
	if json.Unmarshal(view.Blocks, &blocks) != nil {
		return invalid("must provide an array [json-pointer:/view/blocks]")
	}
	if len(blocks) > maxHomeBlocks {
		return invalid(fmt.Sprintf("no more than %d items allowed [json-pointer:/view/blocks]", maxHomeBlocks))
	}
	if _, e := validateBlocks(string(view.Blocks)); e != nil {
		e["error"] = "invalid_arguments"
		return e
	}
	if s.users[user] == nil {
		return fail("user_not_found")
	}
	if s.homeViews == nil {
		s.homeViews = map[string]*homeView{}
	}
	hv := s.homeViews[user]
	if h := p.Get("hash"); h != "" && (hv == nil || h != hv.hash) {
		return fail("hash_conflict")
	}
	if hv == nil {
		hv = &homeView{id: fmt.Sprintf("V%09d", len(s.homeViews)+1)}
		s.homeViews[user] = hv
	}
	hv.n++
	hv.hash = fmt.Sprintf("%d.%08d", time.Now().Unix(), hv.n)
	hv.blocks = view.Blocks
	return map[string]any{"ok": true, "view": map[string]any{
		"id": hv.id, "team_id": s.opts.TeamID, "type": "home", "blocks": view.Blocks,
		"hash": hv.hash, "app_id": s.opts.AppID, "bot_id": s.opts.BotID,
	}}
}

// HomeView returns the App Home view last published for user (its blocks), and how many
// times views.publish set it; false when none was.
func (s *Server) HomeView(user string) (json.RawMessage, int, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	hv := s.homeViews[user]
	if hv == nil {
		return nil, 0, false
	}
	return hv.blocks, hv.n, true
}

// OpenAppHome is user opening the app's Home tab: an app_home_opened event (tab "home", the
// channel of the person's DM with the app, the view last published for them, if any), when the
// app subscribes to it. It returns the event's id ("" when not subscribed).
func (s *Server) OpenAppHome(user string) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return "", ErrClosed
	}
	if s.users[user] == nil {
		return "", fmt.Errorf("open app home of %s: %w", user, ErrNotFound)
	}
	if !s.subs[SubAppHomeOpened] {
		return "", errors.New("open app home: the app does not subscribe to app_home_opened")
	}
	ev := map[string]any{"type": SubAppHomeOpened, "user": user, "channel": s.dmFor(user), "tab": "home",
		"event_ts": s.nextTS()}
	if hv := s.homeViews[user]; hv != nil {
		ev["view"] = map[string]any{"id": hv.id, "team_id": s.opts.TeamID, "type": "home", "hash": hv.hash}
	}
	id := s.publishLocked(SubAppHomeOpened, ev)
	s.notifyLocked()
	return id, nil
}
