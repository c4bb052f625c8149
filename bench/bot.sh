#!/usr/bin/env bash
# Measures logbook's Socket Mode gateway and cells against a bare slack-go handler (acks and
# replies, stores nothing) in one run, each on its own Slack emulator: envelope-to-ack and
# envelope-to-reply latency p50/p99 and messages/s across 100 threads, with an agent that
# answers at once. Phases: one mention per thread (cell wake-up), 20 msg/s (service time),
# 250 msg/s for 4 s (the target load), then 4 s closed loop (one message in flight per thread).
# Two sub-benchmarks: serve-wiring (one pool, as `logbook serve`) and gateway-own-pool.
# Needs the test PostgreSQL server (see README). Extra arguments go to `go test`
# (e.g. -cpuprofile cpu.out, or -bench 'BenchmarkGateway/serve' via BENCH).
set -euo pipefail
cd "$(dirname "$0")/.."
go test -run '^$' -bench "${BENCH:-^BenchmarkGateway$}" -benchtime=1x -count="${COUNT:-1}" "$@" ./bot |
	grep -E 'bench_test.go|^Benchmark|^ok|FAIL|panic'
