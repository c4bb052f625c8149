#!/usr/bin/env bash
# Issue 19's chaos run: 40 threads of 5 messages at a time against the real binary (Slack
# emulator, a model answering in 0–2 s, local PostgreSQL), `logbook serve` killed with
# SIGKILL every 2–6 s and restarted at once, with default lease and poll settings; then it
# settles and prints messages posted vs stored, turns answered, visible replies per message
# (0 = lost, >=2 = duplicate), turns abandoned without the notice, `logbook audit verify`,
# post→reply p50/p99, and (issue 33) sessions started per replica, peak connections
# (pg_stat_activity) and lease calls per message.
#   bench/chaos.sh            3 minutes
#   bench/chaos.sh 90s        shorter (any Go duration)
#   bench/chaos.sh 90s 2      two replicas at once, each kill hitting one of them
#   bench/chaos.sh 3m 5 3s    five replicas, failing when post→reply p99 is above 3s
# Needs the test PostgreSQL server (see README).
set -euo pipefail
cd "$(dirname "$0")/.."
LOGBOOK_CHAOS="${1:-3m}" LOGBOOK_CHAOS_REPLICAS="${2:-1}" LOGBOOK_CHAOS_P99="${3:-}" go test -count=1 -timeout 30m -run '^TestE2EChaos$' -v ./cmd/logbook |
	grep -E 'CHAOS|chaos_e2e_test|e2e_test.go|^--- |^ok|FAIL|panic'
