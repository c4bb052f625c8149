#!/usr/bin/env bash
# Issue 33's ten-replica run: ten `logbook serve` processes against one Slack emulator and one
# throwaway PostgreSQL cluster (max_connections 100, as CI's), a model answering in 0–2 s,
# 500 threads at 50 msg/s (each thread posts every 10 s, once its previous message is
# answered) for a minute. Prints posted/stored/answered (missing, twice), post→reply p50/p99,
# peak connections against the budget, lease calls per message, sessions started per replica
# (and how many moved), and `logbook audit verify`. Fails on a lost or doubled message, a
# budget passed, lease calls above the bound, an unfair spread or a broken chain.
#   bench/replicas.sh                 500 threads, 50 msg/s, 1m
#   bench/replicas.sh 200 20 30s      threads, msg/s, duration
# Needs the PostgreSQL server binaries (the cluster is started under a temporary directory).
set -euo pipefail
cd "$(dirname "$0")/.."
LOGBOOK_LOAD_THREADS="${1:-500}" LOGBOOK_LOAD_RATE="${2:-50}" LOGBOOK_LOAD_DURATION="${3:-1m}" \
	go test -count=1 -timeout 30m -run '^TestE2ETenReplicas$' -v ./cmd/logbook |
	grep -E 'REPLICAS|replicas_e2e_test|e2e_test.go|^--- |^ok|FAIL|panic'
