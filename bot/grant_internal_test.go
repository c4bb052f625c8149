package bot

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/logbook/logbook/session"
)

// A grant covers only its rule and tool, until it expires or is revoked.
func TestLiveGrantNeverWider(t *testing.T) {
	t.Parallel()
	now := time.Now()
	ev := func(typ session.Type, p any) session.Event {
		b, _ := json.Marshal(p)
		return session.Event{Type: typ, Payload: b, Actor: session.Actor{Kind: session.ActorUser, ID: "U0000001"}}
	}
	evs := []session.Event{
		ev(session.TypeApprovalGrant, session.ApprovalGrant{ID: "g1", Rule: "run_command=ask", Tool: "run_command", ExpiresAt: now.Add(time.Minute)}),
		ev(session.TypeApprovalGrant, session.ApprovalGrant{ID: "g2", Rule: "*=ask", Tool: "read_file", ExpiresAt: now.Add(time.Minute)}),
		ev(session.TypeApprovalGrantRevoked, session.ApprovalGrantRevoked{ID: "g2"}),
	}
	for _, tc := range []struct {
		rule, tool string
		at         time.Time
		want       bool
	}{
		{"run_command=ask", "run_command", now, true},
		{"run_command=ask approvers:2", "run_command", now, false}, // the policy changed: another rule
		{"C0000001/run_command=ask", "run_command", now, false},
		{"run_command=ask", "write_file", now, false},
		{"run_command=ask", "run_command", now.Add(time.Minute), false}, // expired
		{"*=ask", "read_file", now, false},                              // revoked
	} {
		if _, got := liveGrant(evs, tc.rule, tc.tool, tc.at); got != tc.want {
			t.Errorf("%s %s at +%v: %v, want %v", tc.rule, tc.tool, tc.at.Sub(now), got, tc.want)
		}
	}
}
