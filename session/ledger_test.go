package session_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/logbook/logbook/session"
)

// Each change of a channel is one ledger event (one call of logbook_append), appended in the
// transaction that writes its projection row, with who, how and the row's time; the
// projections then agree with the ledger. The statements each change costs are logged (the
// issue's closing figure: appends per settings change).
func TestEachChannelChangeAppendsOneLedgerEvent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, tr, _ := newTracedStore(t)
	tr.take()
	count := func(what string, want session.Type, f func() error) {
		t.Helper()
		tr.mu.Lock()
		tr.sqls = nil
		tr.mu.Unlock()
		if err := f(); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		tr.mu.Lock()
		statements := 0
		for _, q := range tr.sqls {
			if q != "SET ROLE logbook_app" { // a new connection's, not the change's
				statements++
			}
		}
		tr.mu.Unlock()
		one, calls := tr.take()
		if one != 0 || calls != 1 {
			t.Errorf("%s: %d one-event statements, %d calls of logbook_append; want one call", what, one, calls)
		}
		t.Logf("%s: 1 append, %d statements (begin and commit included)", what, statements)
		id, err := st.Ledger(ctx, "C0000009")
		if err != nil {
			t.Fatal(err)
		}
		evs, err := st.Events(ctx, id, session.Range{})
		if err != nil || evs[len(evs)-1].Type != want {
			t.Fatalf("%s: the ledger's last event is not %s: %v", what, want, err)
		}
	}
	var set session.ChannelSetting
	count("a setting changed", session.TypeSettingChanged, func() (err error) {
		set, err = st.SetChannelSetting(ctx, session.ChannelSetting{Team: "T1", Channel: "C0000009", Name: "model", New: "m", Set: true, SetBy: "U1"})
		return err
	})
	if set.Ledger.Seq != 1 || set.Ledger.Actor != (session.Actor{Kind: session.ActorUser, ID: "U1"}) || set.Ledger.IdempotencyKey != "setting/1" {
		t.Errorf("the setting's ledger event: %+v", set.Ledger)
	}
	var note session.Note
	count("a note added by the agent", session.TypeNoteAdded, func() (err error) {
		note, err = st.AddNote(ctx, session.Note{Team: "T1", Channel: "C0000009", Text: "n", ByKind: session.NoteByAgent, By: "UBOT", CallID: "c1", Session: set.Ledger.SessionID})
		return err
	})
	// The same remember call again (a replay) finds its note: no second row, no second event.
	if again, err := st.AddNote(ctx, session.Note{Team: "T1", Channel: "C0000009", Text: "n", ByKind: session.NoteByAgent, By: "UBOT", CallID: "c1", Session: set.Ledger.SessionID}); err != nil || again.ID != note.ID {
		t.Fatalf("the call again: %+v, %v", again, err)
	}
	count("a note forgotten", session.TypeNoteForgotten, func() error {
		_, err := st.ForgetNote(ctx, "T1", "C0000009", note.ID, "U1")
		return err
	})
	count("a repository set", session.TypeRepoSet, func() error {
		_, err := st.SetChannelRepo(ctx, session.ChannelRepo{Team: "T1", Channel: "C0000009", URL: "https://github.com/a/b", SetBy: "U1", Via: session.ViaCLI})
		return err
	})
	count("a budget raised", session.TypeBudgetRaised, func() error {
		_, err := st.RaiseBudget(ctx, session.BudgetRaise{Day: time.Now(), Scope: "channel", Subject: "C0000009", Channel: "C0000009", Amount: 1, RaisedBy: "U1"})
		return err
	})
	var sc session.Schedule
	count("a schedule added", session.TypeScheduleAdded, func() (err error) {
		sc, err = st.AddSchedule(ctx, session.Schedule{Team: "T1", Channel: "C0000009", Spec: "@daily", Prompt: "p", AddedBy: "U1"})
		return err
	})
	count("a schedule removed", session.TypeScheduleRemoved, func() error {
		_, err := st.RemoveSchedule(ctx, "T1", sc.ID, "U1")
		return err
	})
	sc2, err := st.AddSchedule(ctx, session.Schedule{Team: "T1", Channel: "C0000009", Spec: "@hourly", Prompt: "p", AddedBy: "U1"})
	if err != nil {
		t.Fatal(err)
	}
	count("a schedule stopped by logbook", session.TypeScheduleRemoved, func() error {
		return st.StopSchedule(ctx, "T1", sc2.ID, "the channel is private now")
	})
	count("a connector connected", session.TypeConnectorConnected, func() error {
		return st.ConnectMCP(ctx, session.MCPToken{Server: "docs", Channel: "C0000009", Sealed: []byte("sealed"), ConnectedBy: "ada@example.com", ConnectedAt: time.Now()})
	})
	count("a schedule paused by logbook", session.TypeAutomationPaused, func() error {
		_, ok, err := st.PauseAutomation(ctx, session.Pause{Kind: session.AutomationSchedule, Name: "7", Channel: "C0000009", Reason: "3 ticks failed in a row"})
		if err == nil && !ok {
			err = errors.New("not paused")
		}
		return err
	})
	count("a schedule resumed by an admin", session.TypeAutomationResumed, func() error {
		_, err := st.ResumeAutomation(ctx, session.Pause{Kind: session.AutomationSchedule, Name: "7", Channel: "C0000009", Actor: "U1"})
		return err
	})
	id, err := st.Ledger(ctx, "C0000009")
	if err != nil {
		t.Fatal(err)
	}
	evs, err := st.Events(ctx, id, session.Range{})
	if err != nil || len(evs) != 12 {
		t.Fatalf("%d ledger events, %v; want 12", len(evs), err)
	}
	var paused, resumed session.AutomationPauseChanged
	if err := evs[10].Decode(&paused); err != nil || evs[10].Actor.Kind != session.ActorSystem || paused.Reason == "" || paused.Via != session.ViaLogbook || paused.Name != "7" {
		t.Errorf("the pause's ledger event: %+v %+v, %v", evs[10].Actor, paused, err)
	}
	if err := evs[11].Decode(&resumed); err != nil || evs[11].Actor != (session.Actor{Kind: session.ActorUser, ID: "U1"}) || resumed.Via != session.ViaSlash {
		t.Errorf("the resume's ledger event: %+v %+v, %v", evs[11].Actor, resumed, err)
	}
	var conn session.ConnectorConnected
	if err := evs[9].Decode(&conn); err != nil || conn.Server != "docs" || conn.By != "ada@example.com" || conn.Via != session.ViaWeb {
		t.Errorf("connector_connected payload %s, %v", evs[9].Payload, err)
	}
	for _, e := range evs {
		if strings.Contains(string(e.Payload), "c2VhbGVk") { // base64 of the sealed token
			t.Errorf("a token in the ledger: %s %s", e.Type, e.Payload)
		}
	}
	var stopped session.ScheduleRemoved
	if err := evs[8].Decode(&stopped); err != nil || evs[8].Actor.Kind != session.ActorSystem || stopped.Reason == "" || stopped.Via != session.ViaLogbook {
		t.Errorf("the stop's ledger event: %+v %+v, %v", evs[8].Actor, stopped, err)
	}
	if evs[1].Actor.Kind != session.ActorBot || evs[3].Actor.Kind != session.ActorSystem {
		t.Errorf("actors: the agent's note %+v, the operator's repository %+v", evs[1].Actor, evs[3].Actor)
	}
	var repo session.RepoSet
	if err := evs[3].Decode(&repo); err != nil || repo.Via != session.ViaCLI || repo.By != "U1" || repo.At.IsZero() {
		t.Errorf("repo_set payload: %+v, %v", repo, err)
	}
	if fs, err := st.CheckLedgers(ctx, ""); err != nil || len(fs) != 0 {
		t.Errorf("projections against the ledger: %v, %v", fs, err)
	}
	if _, err := st.SetChannelSetting(ctx, session.ChannelSetting{Team: "T1", Channel: "C0000009", Name: "model", New: "m", Set: true, SetBy: "U1", Via: "carrier pigeon"}); !errors.Is(err, session.ErrInvalidEvent) {
		t.Errorf("an unknown way: %v", err)
	}
}

// A ledger event that cannot be appended leaves no projection row: the row and its event are
// one transaction.
func TestAChangeWhoseLedgerEventFailsLeavesNoRow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, pool, _ := newStorePool(t, 2)
	small := session.NewStore(pool, session.Options{MaxPayload: 300})
	_, err := small.SetChannelSetting(ctx, session.ChannelSetting{Team: "T1", Channel: "C0000009", Name: "instructions",
		New: strings.Repeat("x", 400), Set: true, SetBy: "U1"})
	var tooLarge *session.TooLargeError
	if !errors.As(err, &tooLarge) {
		t.Fatalf("a change whose ledger event is too large: %v", err)
	}
	if got, err := session.NewStore(pool, session.Options{}).ChannelSettings(ctx, "T1", "C0000009"); err != nil || len(got) != 0 {
		t.Errorf("settings after the failed change: %v, %v; want none", got, err)
	}
}

// ChannelSeen tells a channel logbook stored threads of (its team, how many, the newest's
// start) from one it has only a ledger of, and from one it never saw.
func TestChannelSeen(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, _ := newStore(t)
	if c, err := st.ChannelSeen(ctx, "C0000001"); err != nil || c != (session.ChannelSeen{}) {
		t.Fatalf("a channel never seen: %+v, %v", c, err)
	}
	for _, ts := range []string{"1700000000.000100", "1700000001.000100"} {
		if _, err := st.Open(ctx, session.ThreadKey{Team: "T1", Channel: "C0000001", ThreadTS: ts}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := st.SetChannelSetting(ctx, session.ChannelSetting{Team: "T1", Channel: "C0000002", Name: "model", New: "m", Set: true, SetBy: "U1"}); err != nil {
		t.Fatal(err)
	}
	c, err := st.ChannelSeen(ctx, "C0000001")
	if err != nil || c.Team != "T1" || c.Threads != 2 || c.LastThread.IsZero() || c.Ledger {
		t.Errorf("a channel with two threads: %+v, %v", c, err)
	}
	c, err = st.ChannelSeen(ctx, "C0000002")
	if err != nil || c.Team != "T1" || c.Threads != 0 || !c.LastThread.IsZero() || !c.Ledger {
		t.Errorf("a channel with a ledger only: %+v, %v", c, err)
	}
}
