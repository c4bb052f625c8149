#!/usr/bin/env bash
# Issue 53's backlog on one replica: ingest replicas store N thread-starting mentions through
# the Slack emulator and die (kill -9) before answering them, then one `logbook serve` with
# the defaults (LOGBOOK_IDLE_TIMEOUT 10m, LOGBOOK_WAKE_LIMIT 32) and a model that answers at
# once works through the backlog, on a throwaway PostgreSQL cluster with default settings
# (max_connections 100, max_locks_per_transaction 64). Prints a timeline every 30 s (pending
# sessions, the replica's unexpired leases, the server's locks from pg_locks, logbook's
# connections, the replica's RSS), then: sessions answered (missing, twice), the time to
# drain and answers/s, the peaks of leases, locks, connections and RSS and what is left 30 s
# after the drain, leases lost, failed renewals, out-of-shared-memory errors (53200) in the
# server's and the replica's logs, lease acquisitions, and `logbook audit verify`. Fails on an
# answer missing or doubled, a lease lost, a broken chain, or a backlog not drained in time.
#   bench/backlog.sh                 20,000 sessions, at most 40 minutes
#   bench/backlog.sh 5000 15m        sessions, the cap on the drain
# LOGBOOK_BACKLOG_BINARY=path runs another build (main before the fix: a before).
# Needs the PostgreSQL server binaries (the cluster is started under a temporary directory).
set -euo pipefail
cd "$(dirname "$0")/.."
LOGBOOK_BACKLOG_SESSIONS="${1:-20000}" LOGBOOK_BACKLOG_CAP="${2:-40m}" \
	go test -count=1 -timeout 90m -run '^TestE2EBacklog$' -v ./cmd/logbook |
	grep -E 'BACKLOG|^ +[0-9hms.]+ pending|backlog_e2e_test|^--- |^ok|FAIL|panic'
exit "${PIPESTATUS[0]}"
