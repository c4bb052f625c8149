#!/usr/bin/env bash
# Issue 51's tailer against the raw read of the log, in one run on one database each: events a
# second delivered to one sink from a backlog of 5,000 new threads (a signed webhook, one POST an
# event; the OTLP audit stream, a batch a request) against session.Store.ReadAll of the same
# backlog, and the lag from an append's commit to the receiver at 250 appends a second for 10 s
# (p50/p99/max). Run it alone: heavy --solo bench/stream.sh. Needs the test server (see README).
set -euo pipefail
cd "$(dirname "$0")/.."
echo "load: $(cut -d' ' -f1-3 /proc/loadavg)"
go test -run '^$' -bench '^BenchmarkStream$' -benchtime=1x ./bot/stream/webhooks | grep -E '^Benchmark|^ok|FAIL'
go test -run '^$' -bench '^BenchmarkAuditStream$' -benchtime=1x ./audit | grep -E '^Benchmark|^ok|FAIL'
echo "load: $(cut -d' ' -f1-3 /proc/loadavg)"
