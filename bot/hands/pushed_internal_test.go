package hands

import (
	"context"
	"encoding/json"
	"slices"
	"testing"

	"github.com/rs/zerolog"

	"github.com/logbook/logbook/session"
)

// connectionLog is a session's log of egress_connection events only.
type connectionLog struct{ evs []session.Event }

func (l *connectionLog) Append(context.Context, ...session.NewEvent) ([]session.Event, error) {
	panic("connectionLog is read-only")
}

func (l *connectionLog) Events(_ context.Context, r session.Range) ([]session.Event, error) {
	if !slices.Equal(r.Types, []session.Type{session.TypeEgressConnection}) {
		panic("connectionLog holds egress_connection events only")
	}
	return l.evs, nil
}

// A new sandbox owns only the branches the repository reported updated: not those a push
// asked for that the repository refused (recorded allowed and as git-receive-pack before
// refusals were read), nor a refused or proxy-refused push's.
func TestPushedBranchesAreOnlyWhatTheRepositoryTook(t *testing.T) {
	t.Parallel()
	l := &connectionLog{}
	for i, c := range []session.EgressConnection{
		{Kind: "git", Allowed: true, Reason: "git-receive-pack", Refs: []string{"refs/heads/logbook/mine"}, Pushed: []string{"refs/heads/logbook/mine"}},
		{Kind: "git", Allowed: true, Reason: "git-receive-pack", Refs: []string{"refs/heads/logbook/victim"}},
		{Kind: "git", Allowed: true, Reason: "git-receive-pack, in part: refs/heads/logbook/held refused by the repository: hook declined",
			Refs: []string{"refs/heads/logbook/also", "refs/heads/logbook/held"}, Pushed: []string{"refs/heads/logbook/also"}},
		{Kind: "git", Reason: "push refused: refs/heads/logbook/other refused by the repository: failed to update ref", Refs: []string{"refs/heads/logbook/other"}},
		{Kind: "git", Reason: "push refused: logbook/x exists and was not pushed from this thread", Refs: []string{"refs/heads/logbook/x"}},
		{Kind: "connect", Allowed: true, Pushed: []string{"refs/heads/logbook/connect"}},
	} {
		b, err := json.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		l.evs = append(l.evs, session.Event{Seq: int64(i + 1), Type: session.TypeEgressConnection, Payload: b})
	}
	h := &Hands{log: l, zl: zerolog.Nop()}
	if got := h.pushedBranches(context.Background()); !slices.Equal(got, []string{"logbook/mine", "logbook/also"}) {
		t.Errorf("owned %q; want only logbook/mine and logbook/also", got)
	}
}
