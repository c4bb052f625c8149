package main

import (
	"os"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/logbook/logbook/bot/brain/fakeprovider"
	"github.com/logbook/logbook/bot/slackemu"
	"github.com/logbook/logbook/session"
)

// How a replica goes away mid-turn in the failover tests.
type failoverKind int

const (
	killRestart       failoverKind = iota // kill -9, a new process started at once
	killPeer                              // two replicas, kill -9 of the one running the turn
	sigtermPeer                           // two replicas, SIGTERM of the one running the turn
	killPeerHeartbeat                     // killPeer, the replicas holding heartbeat claims (LOGBOOK_LIVENESS=heartbeat)
)

func (k failoverKind) String() string {
	return [...]string{"kill -9, restart", "kill -9, peer", "SIGTERM, peer", "kill -9, peer, heartbeat claims"}[k]
}

// defaults unsets the e2e environment's short lease and poll: the failover tests run with
// the settings a deployment has (lease 30s, poll 5s).
var defaults = []string{"LOGBOOK_LEASE_TTL=", "LOGBOOK_POLL_INTERVAL="}

// failoverDrain is the SIGTERM case's drain timeout: the model is held past it, so the turn
// is handed over (a turn that finishes in time is answered by the stopping replica itself).
const failoverDrain = time.Second

// failover runs one turn whose model call is held, takes away the replica running it as
// kind says, and checks the turn finishes elsewhere exactly once: one reply, one
// turn_completed. It reports and returns how long after the kill (or SIGTERM) the reply
// was visible in the thread.
func failover(t *testing.T, kind failoverKind) (*e2e, session.Session, slackemu.Posted) {
	t.Helper()
	e, s, top, took := measureFailover(t, kind)
	t.Logf("%s: reply visible %v after the signal", kind, took.Round(time.Millisecond))
	bound := 10 * time.Second
	if kind == killPeerHeartbeat {
		// The dead replica's row lives up to its TTL past its last renewal; then the dead-owner
		// scan (every 2 s in a fleet) finds the session.
		bound = session.DefaultHeartbeatTTL + 8*time.Second
	}
	if took > bound {
		t.Fatalf("%s: the turn resumed %v after the signal, want seconds", kind, took)
	}
	return e, s, top
}

func measureFailover(t *testing.T, kind failoverKind) (*e2e, session.Session, slackemu.Posted, time.Duration) {
	t.Helper()
	e := newE2E(t, slackemu.Options{})
	e.model.Push(fakeprovider.Reply{Text: "Finished after the failover."}, fakeprovider.Reply{Text: "Failover"})
	e.gate.close()
	env := append(slices.Clone(defaults), "LOGBOOK_DRAIN_TIMEOUT="+failoverDrain.String())
	if kind == killPeerHeartbeat {
		// A lease of 5 minutes: only the claim's expiry can free the session within the bound.
		env = append(env, "LOGBOOK_LIVENESS=heartbeat", "LOGBOOK_PEER_ADDR=127.0.0.1", "LOGBOOK_REPLICAS=2", "LOGBOOK_LEASE_TTL=5m")
	}
	procs := []*proc{e.serve(env...)}
	if kind != killRestart {
		procs = append(procs, e.serve(env...))
	}
	top := e.post(slackemu.Post{Channel: general, User: ada, Text: mention("long task")})
	e.waitFor("the model call to be in flight", func() bool { return e.gate.held() == 1 })
	s := e.session(top.TS)
	// The replica running the turn is the one whose cell woke last.
	woken := e.events(s.ID, session.TypeCellWoken)
	var w session.CellWoken
	if len(woken) == 0 || woken[len(woken)-1].Decode(&w) != nil {
		t.Fatalf("no cell_woken: %v", typeList(e.events(s.ID)))
	}
	victim := procs[0]
	for _, p := range procs {
		if p.cmd.Process.Pid == w.PID {
			victim = p
		}
	}
	dropped := e.gate.droppedCount()
	sig := syscall.SIGKILL
	if kind == sigtermPeer {
		sig = syscall.SIGTERM
	}
	start := time.Now()
	if err := victim.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	// Release the model only once the gate saw the victim's request go away (killed, or
	// cancelled at the end of the drain), so it can never take the reply meant for the
	// replica that resumes the turn; that replica's own call may wait here meanwhile.
	e.waitFor("the victim's model call to be dropped", func() bool { return e.gate.droppedCount() > dropped })
	e.gate.release()
	if kind == killRestart {
		<-victim.done
		e.serve(defaults...)
	}
	r := e.replies(top.TS, 1)
	took := time.Since(start)
	e.waitFor("turn_completed", func() bool { return len(e.events(s.ID, session.TypeTurnCompleted)) == 1 })
	if r[0].Text != "Finished after the failover." || len(e.emu.BotReplies(general, top.TS)) != 1 {
		t.Fatalf("%s: replies %+v", kind, e.emu.BotReplies(general, top.TS))
	}
	if kind == sigtermPeer {
		select {
		case <-victim.done:
		case <-time.After(30 * time.Second):
			t.Fatalf("the SIGTERMed replica did not exit after its drain:\n%s", victim.out.String())
		}
		if code := victim.cmd.ProcessState.ExitCode(); code != 0 {
			t.Fatalf("the SIGTERMed replica exited with %d:\n%s", code, victim.out.String())
		}
	}
	return e, s, top, took
}

// Two replicas; kill -9 of the one running the turn: the other finishes it within seconds
// (its dead-owner poll finds the lease of a replica whose claim is free), not after 30 s.
func TestE2EKillReplicaPeerTakesOver(t *testing.T) {
	t.Parallel()
	failover(t, killPeer)
}

// #53: two replicas holding heartbeat claims (no connection of their own); kill -9 of the one
// running the turn: its row expires at most a TTL after its last renewal, and the other
// finishes the turn once, with no LISTEN connection anywhere.
func TestE2EKillHeartbeatReplicaPeerTakesOver(t *testing.T) {
	t.Parallel()
	e, _, _ := failover(t, killPeerHeartbeat)
	var listens int
	query(t, e.dbURL, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()
		AND application_name IN ('logbook-listen', 'logbook-watch')`, &listens)
	if listens != 0 {
		t.Fatalf("%d LISTEN or watch connections in a heartbeat fleet", listens)
	}
}

// Two replicas; SIGTERM of the one running the turn: it drains (the model is held past the
// drain timeout), hands the turn over, and the peer, woken through NOTIFY, finishes it.
func TestE2ESigtermHandsOverToPeer(t *testing.T) {
	t.Parallel()
	failover(t, sigtermPeer)
}

// The failover figures of issue 19: LOGBOOK_FAILOVER_REPS=N repetitions of each kind, p50
// and p99 of signal → reply. Off by default (CI does not run it):
//
//	LOGBOOK_FAILOVER_REPS=5 go test ./cmd/logbook -run TestE2EFailoverFigures -v
func TestE2EFailoverFigures(t *testing.T) {
	reps, _ := strconv.Atoi(os.Getenv("LOGBOOK_FAILOVER_REPS"))
	if reps <= 0 {
		t.Skip("set LOGBOOK_FAILOVER_REPS=N to measure")
	}
	for _, kind := range []failoverKind{killRestart, killPeer, sigtermPeer} {
		var took []time.Duration
		for i := range reps {
			t.Run(kind.String()+"/"+strconv.Itoa(i), func(t *testing.T) {
				_, _, _, d := measureFailover(t, kind)
				t.Logf("%s: %v", kind, d.Round(time.Millisecond))
				took = append(took, d)
			})
		}
		slices.Sort(took)
		if len(took) == 0 {
			continue
		}
		p := func(q float64) time.Duration { return took[min(len(took)-1, int(q*float64(len(took))))] }
		extra := ""
		if kind == sigtermPeer {
			extra = " (includes the " + failoverDrain.String() + " drain timeout the held model outlasts)"
		}
		t.Logf("FAILOVER %s: n=%d p50=%v p99=%v max=%v%s", kind, len(took), p(0.5).Round(time.Millisecond),
			p(0.99).Round(time.Millisecond), took[len(took)-1].Round(time.Millisecond), extra)
	}
}
