package web_test

import (
	"context"
	"fmt"
	"html"
	"net/http/httptest"
	"net/url"
	"regexp"
	"slices"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/logbook/logbook/bot/web"
	"github.com/logbook/logbook/session"
	"github.com/logbook/logbook/session/search"
)

// A search the walk cuts ("deploy error": both words in every message, the phrase in one in
// three) shows what it found with a "More results" link; following the links shows every
// matching message once, and never one of a channel that is private now.
func TestSearchPageGoesOnWhenCut(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	var want []string
	for _, ch := range []string{"C0000001", "C0000003"} { // C0000003 is private now
		thread := "1700001000.000100"
		s, err := f.store.Open(f.ctx, session.ThreadKey{Team: "T0000001", Channel: ch, ThreadTS: thread})
		if err != nil {
			t.Fatal(err)
		}
		var evs []session.NewEvent
		for i := range 30 {
			text := fmt.Sprintf("error: we deploy again, try %d", i)
			if i%3 == 0 {
				text = fmt.Sprintf("deploy error number %d", i)
			}
			ts := fmt.Sprintf("1700001000.%06d", 200+i)
			evs = append(evs, session.NewEvent{Type: session.TypeUserMessage, Actor: alice, IdempotencyKey: "m:" + ts,
				Payload: session.UserMessage{Team: "T0000001", Channel: ch, ThreadTS: thread, TS: ts, User: "U0000001", UserName: "alice", Text: text}})
		}
		got, err := f.store.Append(f.ctx, s.ID, evs...)
		if err != nil {
			t.Fatal(err)
		}
		for i, e := range got {
			if i%3 == 0 && ch == "C0000001" {
				want = append(want, fmt.Sprintf("/sessions/%s#e%d", s.ID, e.Seq))
			}
		}
	}
	ctx, cancel := context.WithTimeout(f.ctx, time.Minute)
	defer cancel()
	if err := search.NewIndexer(f.store, f.app, zerolog.Nop(), search.IndexerOptions{}).Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := f.admin.Exec(f.ctx, "ANALYZE search_docs"); err != nil {
		t.Fatal(err)
	}
	h, err := web.Handler(web.Config{Sessions: f.store, AccessLog: f.app, Visibility: f.vis,
		Finder: search.NewSearcher(f.app, search.Options{Window: 3, MaxWalk: 9}),
		Access: web.Access{Tokens: []web.Token{{Name: "ci-bot", Secret: tokenSecret}}}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	f.srv = srv

	hitRE := regexp.MustCompile(`<a class="title" href="(/sessions/[^"]+)"`)
	moreRE := regexp.MustCompile(`<a href="([^"]+)" id="more">More results</a>`)
	var got []string
	path := "/search?kind=messages&q=" + url.QueryEscape(`"deploy error"`)
	pages := 0
	for path != "" {
		pages++
		if pages > 30 {
			t.Fatal("More never ends")
		}
		status, body, _ := f.get(path, asToken)
		if status != 200 {
			t.Fatalf("%s: status %d\n%s", path, status, body)
		}
		for _, m := range hitRE.FindAllStringSubmatch(body, -1) {
			got = append(got, m[1])
		}
		path = ""
		if m := moreRE.FindStringSubmatch(body); m != nil {
			path = html.UnescapeString(m[1])
		}
	}
	if pages < 2 {
		t.Errorf("one page: the search was not cut")
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("%d pages show %v\nwant each visible match once: %v", pages, got, want)
	}
	if status, body, _ := f.get("/search?q=deploy&after=bogus", asToken); status != 200 || !regexp.MustCompile(`Cannot search for that: the page to continue from`).MatchString(body) {
		t.Errorf("a bad after: status %d\n%s", status, body)
	}
}
