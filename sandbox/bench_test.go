package sandbox

import (
	"context"
	"os/exec"
	"slices"
	"testing"
	"time"

	"github.com/logbook/logbook/sandbox/egress"
)

// The benchmarks time each sandbox operation next to a plain
// exec.Command("true").Run() in the same loop, the floor any process-based
// sandbox pays, and report p50/p99 of both and their ratio.

func BenchmarkProvision(b *testing.B) {
	for _, kind := range providerKinds {
		b.Run(kind, func(b *testing.B) {
			p, _ := mustProvider(b, kind, nil)
			ctx := context.Background()
			var op, floor []time.Duration
			for b.Loop() {
				floor = append(floor, timeFloor(b))
				start := time.Now()
				sb, err := p.Provision(ctx, "bench", Recipe{})
				op = append(op, time.Since(start))
				if err != nil {
					b.Fatal(err)
				}
				if err := sb.Close(); err != nil {
					b.Fatal(err)
				}
			}
			reportLatencies(b, op, floor)
		})
	}
}

func BenchmarkExecTrue(b *testing.B) {
	for _, kind := range providerKinds {
		b.Run(kind, func(b *testing.B) {
			p, _ := mustProvider(b, kind, nil)
			sb := mustProvision(b, p, "bench", Recipe{})
			ctx := context.Background()
			req := ExecRequest{Argv: []string{"true"}}
			var op, floor []time.Duration
			for b.Loop() {
				floor = append(floor, timeFloor(b))
				start := time.Now()
				res, err := sb.Exec(ctx, req)
				op = append(op, time.Since(start))
				if err != nil || res.ExitCode != 0 {
					b.Fatalf("Exec: %+v, %v", res, err)
				}
			}
			reportLatencies(b, op, floor)
		})
	}
}

func timeFloor(b *testing.B) time.Duration {
	start := time.Now()
	if err := exec.Command("true").Run(); err != nil {
		b.Fatal(err)
	}
	return time.Since(start)
}

func reportLatencies(b *testing.B, op, floor []time.Duration) {
	p50, p99 := percentile(op, 50), percentile(op, 99)
	f50, f99 := percentile(floor, 50), percentile(floor, 99)
	b.ReportMetric(float64(p50.Microseconds()), "p50-µs")
	b.ReportMetric(float64(p99.Microseconds()), "p99-µs")
	b.ReportMetric(float64(f50.Microseconds()), "floor-p50-µs")
	b.ReportMetric(float64(f99.Microseconds()), "floor-p99-µs")
	if f50 > 0 {
		b.ReportMetric(float64(p50)/float64(f50), "p50-x-floor")
	}
	if f99 > 0 {
		b.ReportMetric(float64(p99)/float64(f99), "p99-x-floor")
	}
}

func percentile(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, (len(s)*p+99)/100-1)]
}

// BenchmarkExecEgress is what the egress forwarder adds to every command of a bwrap
// sandbox: Exec("true") with an egress, next to the same in a sandbox without one (the
// "floor" columns), in the same loop.
func BenchmarkExecEgress(b *testing.B) {
	p, _ := mustProvider(b, KindBwrap, nil)
	with := mustProvision(b, p, "bench-egress", Recipe{Egress: egress.New(egress.Options{})})
	without := mustProvision(b, p, "bench-plain", Recipe{})
	ctx := context.Background()
	req := ExecRequest{Argv: []string{"true"}}
	var op, floor []time.Duration
	for b.Loop() {
		start := time.Now()
		if res, err := without.Exec(ctx, req); err != nil || res.ExitCode != 0 {
			b.Fatalf("Exec: %+v, %v", res, err)
		}
		floor = append(floor, time.Since(start))
		start = time.Now()
		if res, err := with.Exec(ctx, req); err != nil || res.ExitCode != 0 {
			b.Fatalf("Exec with egress: %+v, %v", res, err)
		}
		op = append(op, time.Since(start))
	}
	reportLatencies(b, op, floor)
}
