package bot_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/slack-go/slack"
	"github.com/slack-go/slack/socketmode"

	"github.com/logbook/logbook/bot"
	"github.com/logbook/logbook/bot/brain"
	"github.com/logbook/logbook/bot/slackemu"
	"github.com/logbook/logbook/migrations/pgtest"
	"github.com/logbook/logbook/session"
)

// BenchmarkServeMemory shows what cells cost in memory, with the gateway and runner wired as
// `logbook serve` wires them: with no session, with 200 sessions whose cells are alive (each
// thread holds 10 messages of 2 KiB and their answers, which a cell keeps in memory as its
// log), and after every cell was evicted. Reported: VmRSS (/proc/self/status) and the Go
// heap in use (runtime.MemStats.HeapInuse), each after a GC that returns freed memory to
// the OS (debug.FreeOSMemory). Run with bench/memory.sh.
func BenchmarkServeMemory(b *testing.B) {
	const sessions, perThread = 200, 10
	for range b.N {
		emu := startBenchEmulator(b)
		ctx, cancel := context.WithCancel(context.Background())
		dbURL := pgtest.New(b)
		pool, err := session.Connect(ctx, dbURL, session.PoolOptions{Role: "logbook_app", MaxConns: 8})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(pool.Close)
		store := session.NewStore(pool, session.Options{})
		api := slack.New(emu.BotToken(), slack.OptionAPIURL(emu.APIURL()), slack.OptionAppLevelToken(emu.AppToken()))
		sm := socketmode.New(api, socketmode.OptionPingInterval(2*time.Second))
		me, err := bot.WhoAmI(ctx, api)
		if err != nil {
			b.Fatal(err)
		}
		metrics := bot.NewMetrics(prometheus.NewRegistry())
		log := zerolog.Nop() // a test writer keeps every line in memory until the benchmark ends
		runner := bot.NewRunner(bot.Deps{Log: log, Store: store, DatabaseURL: dbURL, Agent: shortAgent{},
			Deliver: bot.NewDeliverer(api, log, metrics, bot.DeliveryConfig{}), Metrics: metrics}, bot.RunnerConfig{
			MaxReplies: -1, IdleTimeout: 10 * time.Minute,
			Where: brain.Where{Workspace: me.Team, BotName: me.User, BotUserID: me.UserID},
		})
		gw := bot.NewGateway(log, store, api, sm, me, runner.Stored, metrics, nil, bot.GatewayConfig{})
		var wg sync.WaitGroup
		wg.Go(func() { _ = gw.Run(ctx) })
		wg.Go(func() { _ = runner.Run(ctx) })

		idle := measureMemory()
		filler := strings.Repeat("x", 2048)
		parents := make([]string, sessions)
		for m := range perThread {
			for th := range sessions {
				p := slackemu.Post{Channel: general, User: ada, ThreadTS: parents[th],
					Text: fmt.Sprintf("thread %d message %d %s", th, m, filler)}
				if p.ThreadTS == "" {
					p.Text = "<@" + botUser + "> " + p.Text
				}
				posted, err := emu.Post(p)
				if err != nil {
					b.Fatal(err)
				}
				if parents[th] == "" {
					parents[th] = posted.TS
				}
			}
			// Each round waits for the bot's answer in every thread (a thread's reply count
			// also counts the people's messages, some of which may still be on their way).
			waitUntil(b, fmt.Sprintf("round %d answered", m), func() bool {
				for _, ts := range parents {
					msgs, err := emu.Thread(general, ts)
					if err != nil {
						return false
					}
					answers := 0
					for _, msg := range msgs {
						if msg.User == botUser {
							answers++
						}
					}
					if answers < m+1 {
						return false
					}
				}
				return true
			})
		}
		if n := runner.Active(); n != sessions {
			b.Fatalf("%d cells alive, want %d", n, sessions)
		}
		active := measureMemory()
		// Evict asks the cells idle at the time; a cell still finishing its turn is asked again.
		waitUntil(b, "every cell evicted", func() bool { runner.Evict(); return runner.Active() == 0 })
		evicted := measureMemory()
		time.Sleep(3 * time.Second) // what is still in flight (deliveries, pool buffers) settles
		settled := measureMemory()
		if n := runner.Active(); n != 0 {
			b.Fatalf("%d cells woke again after eviction: the settled figure would measure them", n)
		}

		b.Logf("serve memory: none %s | %d active sessions %s | after eviction %s | 3s later %s (the in-process Slack emulator keeps every message)",
			idle, sessions, active, evicted, settled)
		b.ReportMetric(idle.rssMiB, "idle-rss-MiB")
		b.ReportMetric(active.rssMiB, "active-rss-MiB")
		b.ReportMetric(evicted.rssMiB, "evicted-rss-MiB")
		b.ReportMetric(idle.heapMiB, "idle-heap-MiB")
		b.ReportMetric(active.heapMiB, "active-heap-MiB")
		b.ReportMetric(evicted.heapMiB, "evicted-heap-MiB")
		b.ReportMetric(settled.heapMiB, "settled-heap-MiB")
		b.ReportMetric(settled.rssMiB, "settled-rss-MiB")
		cancel()
		wg.Wait()
	}
}

type memory struct{ rssMiB, heapMiB float64 }

func (m memory) String() string {
	return fmt.Sprintf("VmRSS %.1f MiB, HeapInuse %.1f MiB", m.rssMiB, m.heapMiB)
}

// measureMemory collects garbage, returns freed memory to the OS, and reads VmRSS and the
// heap in use.
func measureMemory() memory {
	runtime.GC()
	debug.FreeOSMemory()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	m := memory{heapMiB: float64(ms.HeapInuse) / (1 << 20)}
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return m
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
			m.rssMiB = kb / 1024
		}
	}
	return m
}

// waitUntil polls cond until it holds, for at most a minute.
func waitUntil(b *testing.B, what string, cond func() bool) {
	b.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			b.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// shortAgent answers every turn with a short fixed reply: the memory a cell holds is then its
// thread's messages, not answers that quote them.
type shortAgent struct{}

func (shortAgent) Run(ctx context.Context, t brain.Turn) (brain.Reply, error) {
	msg := session.AssistantMessage{Text: "ok", Turn: t.TurnSeq}
	stored, err := t.Log.Append(ctx, session.NewEvent{Type: session.TypeAssistantMessage,
		Actor: session.Actor{Kind: session.ActorBot, ID: t.Where.BotUserID}, Payload: msg})
	if err != nil {
		return brain.Reply{}, err
	}
	return brain.Reply{Event: stored[0], Message: msg, Status: session.StatusOK}, nil
}
