package sandbox

import (
	"context"
	"crypto/rand"
	"fmt"
	"path/filepath"
	"testing"
	"time"
)

// BenchmarkProvisionRepo provisions a sandbox with a ~100 MB repository
// (300 files of random bytes) served over loopback HTTP: cold is the first
// Provision with an empty mirror cache (git clone --mirror, then the local
// clone and checkout), warm a second one with the mirror cached (a fetch,
// FetchEvery being zero, then the local clone and checkout).
func BenchmarkProvisionRepo(b *testing.B) {
	files := map[string][]byte{}
	for i := range 300 {
		data := make([]byte, 340<<10)
		_, _ = rand.Read(data)
		files[fmt.Sprintf("d%02d/f%03d.bin", i%10, i)] = data
	}
	gs := newGitServer(b, files)
	for _, kind := range providerKinds {
		b.Run(kind, func(b *testing.B) {
			p, _ := mustProvider(b, kind, func(c *Config) { c.Limits.FileSizeBytes = 1 << 30 })
			recipe := Recipe{Repo: &RepoSpec{URL: gs.URL, Branch: "main", Header: gs.Header}}
			ctx := context.Background()
			var cold, warm time.Duration
			n := 0
			for b.Loop() {
				m := NewMirrors(filepath.Join(b.TempDir(), "mirrors"), p.(*provider).log)
				m.FetchEvery = 0
				p.(*provider).cfg.Mirrors = m
				for i, total := range []*time.Duration{&cold, &warm} {
					start := time.Now()
					sb, err := p.Provision(ctx, fmt.Sprint("bench", i), recipe)
					*total += time.Since(start)
					if err != nil {
						b.Fatal(err)
					}
					if err := sb.Close(); err != nil {
						b.Fatal(err)
					}
				}
				n++
			}
			b.ReportMetric(float64(cold.Milliseconds())/float64(n), "cold-ms")
			b.ReportMetric(float64(warm.Milliseconds())/float64(n), "warm-ms")
			b.Logf("%s: %d rounds, cold %v, warm %v per Provision", kind, n, cold/time.Duration(n), warm/time.Duration(n))
		})
	}
}

// BenchmarkSaveWorkUnchanged is what saving the work after a command costs when the command
// changed nothing (the common case: a test run, a grep): SaveWork of a checkout of 1,000
// files with one uncommitted change, against the work as saved, next to Exec("true") in the
// same sandbox (the "floor" columns).
func BenchmarkSaveWorkUnchanged(b *testing.B) {
	files := map[string][]byte{}
	for i := range 1000 {
		files[fmt.Sprintf("d%02d/f%04d.txt", i%20, i)] = []byte(fmt.Sprintf("file %d\n", i))
	}
	gs := newGitServer(b, files)
	for _, kind := range providerKinds {
		b.Run(kind, func(b *testing.B) {
			p, _ := mustProvider(b, kind, nil)
			sb := mustProvision(b, p, "bench-save", Recipe{Repo: &RepoSpec{URL: gs.URL, Branch: "main", Header: gs.Header}})
			ctx := context.Background()
			mustExec(b, sb, ExecRequest{Shell: "echo changed >> d00/f0000.txt"})
			_, id, err := SaveWork(ctx, sb, Commit(sb), WorkID{})
			if err != nil || id.PatchSHA256 == "" {
				b.Fatalf("first save: %+v %v", id, err)
			}
			var op, floor []time.Duration
			for b.Loop() {
				start := time.Now()
				mustExec(b, sb, ExecRequest{Argv: []string{"true"}})
				floor = append(floor, time.Since(start))
				start = time.Now()
				w, again, err := SaveWork(ctx, sb, Commit(sb), id)
				op = append(op, time.Since(start))
				if err != nil || again != id || w.Patch != nil {
					b.Fatalf("unchanged save: %+v %v", again, err)
				}
			}
			reportLatencies(b, op, floor)
		})
	}
}
