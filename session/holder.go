package session

import (
	"cmp"
	"time"
)

// Holder is the person who holds a session taken over: By (TakenOver.By, else the event's
// actor) since the taken_over event at Seq.
type Holder struct {
	By    string
	Since time.Time
	Seq   int64
}

// HolderOf is who holds the session whose log is evs (in seq order): the newest taken_over
// not followed by a handed_back; ok is false when the bot has it.
func HolderOf(evs []Event) (h Holder, ok bool) {
	for i := len(evs) - 1; i >= 0; i-- {
		switch evs[i].Type {
		case TypeTakenOver:
			var t TakenOver
			_ = evs[i].Decode(&t) // an unreadable payload still took the session over
			return Holder{By: cmp.Or(t.By, evs[i].Actor.ID), Since: evs[i].CreatedAt, Seq: evs[i].Seq}, true
		case TypeHandedBack:
			return Holder{}, false
		}
	}
	return Holder{}, false
}
