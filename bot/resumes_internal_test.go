package bot

import (
	"encoding/json"
	"testing"

	"github.com/logbook/logbook/session"
)

// resumes counts the cells in a row that did not move the turn on, and all of them.
func TestResumes(t *testing.T) {
	woken := session.Event{Type: session.TypeCellWoken}
	result := func(synthetic bool) session.Event {
		p, _ := json.Marshal(session.ToolResult{CallID: "c", Synthetic: synthetic})
		return session.Event{Type: session.TypeToolResult, Payload: p}
	}
	suspended := session.Event{Type: session.TypeTurnSuspended}
	for _, c := range []struct {
		name   string
		evs    []session.Event
		n, all int
	}{
		{"no resumes", nil, 0, 0},
		{"three in a row", []session.Event{woken, woken, woken}, 3, 3},
		{"a finished call in between", []session.Event{woken, woken, result(false), woken}, 1, 3},
		{"an interrupted call is no progress", []session.Event{woken, result(true), woken, woken}, 3, 3},
		{"woken after a suspension is the wait", []session.Event{suspended, woken, woken}, 1, 1},
		{"each cell finishing one call", []session.Event{woken, result(false), woken, result(false), woken, result(false)}, 0, 3},
	} {
		// Seq 1 is the turn's turn_started; the rest follow it.
		evs := []session.Event{{Seq: 1, Type: session.TypeTurnStarted}}
		for i, e := range c.evs {
			e.Seq = int64(i + 2)
			evs = append(evs, e)
		}
		if n, all := resumes(evs, 1); n != c.n || all != c.all {
			t.Errorf("%s: resumes = %d, %d; want %d, %d", c.name, n, all, c.n, c.all)
		}
	}
}
