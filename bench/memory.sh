#!/usr/bin/env bash
# Serve's memory with no session, with 200 active sessions (cells alive, each holding its
# thread's log in memory), and after all 200 were evicted: VmRSS and Go HeapInuse, after a
# GC that returns freed memory to the OS. Needs the test PostgreSQL server (see README).
set -euo pipefail
cd "$(dirname "$0")/.."
go test -run '^$' -bench '^BenchmarkServeMemory$' -benchtime=1x -count="${COUNT:-1}" "$@" ./bot |
	grep -E 'memory_bench_test.go|^Benchmark|^ok|FAIL|panic'
