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
# Issue 53's cost mode: for each fleet size, a throwaway cluster of its own (pg_stat_statements
# loaded): the idle fleet's transactions a second per replica over 20 s (pg_stat_database, and
# the statements by calls), then transactions per message of a steady load. Fails above 5 idle
# transactions a second per replica, or when a message at the largest fleet costs more than
# 25 % above one replica's. Each replica takes its wakes over HTTP (LOGBOOK_PEER_ADDR=127.0.0.1);
# LOGBOOK_COST_PEERS=off routes them by NOTIFY. LOGBOOK_COST_BINARY=path runs another build
# (e.g. main's: before; an older build ignores the peer address).
#   bench/replicas.sh cost                   fleets of 1 and 10; 200 threads, 20 msg/s, 30s
#   bench/replicas.sh cost 1,5,10 500 50 1m  fleet sizes, threads, msg/s, duration
# Issue 53's fifty replicas through PgBouncer: N `logbook serve` processes behind one PgBouncer
# (transaction pooling, default_pool_size 20) in front of a throwaway cluster with default
# settings (max_connections 100). Prints posted/stored/answered (missing, twice), p50/p99, the
# peak of the server's client connections by application_name (PgBouncer's as "pgbouncer")
# against max_connections, the idle fleet's transactions a second per replica over 20 s before
# the load, transactions per message, and `logbook audit verify`. Fails on a lost or doubled
# message, a peak at or above 80 % of max_connections, a replica that cannot start or a broken
# chain. Replicas take wakes over HTTP unless LOGBOOK_COST_PEERS=off, as in the cost mode.
# LOGBOOK_BOUNCER_BINARY=path runs another build (an older one: a before).
# LOGBOOK_BOUNCER_LIVENESS=heartbeat gives the replicas heartbeat claims (LOGBOOK_LIVENESS) and
# no direct URL: the run then fails on any connection of a replica's own to PostgreSQL.
#   bench/replicas.sh bouncer                    50 replicas; 500 threads, 50 msg/s, 1m
#   bench/replicas.sh bouncer 50 200 20 30s      replicas, threads, msg/s, duration
# Needs the PostgreSQL server binaries (the cluster is started under a temporary directory),
# and pgbouncer for the bouncer mode.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = bouncer ]; then
	LOGBOOK_BOUNCER_REPLICAS="${2:-50}" LOGBOOK_LOAD_THREADS="${3:-500}" LOGBOOK_LOAD_RATE="${4:-50}" LOGBOOK_LOAD_DURATION="${5:-1m}" \
		go test -count=1 -timeout 45m -run '^TestE2EReplicasThroughPgBouncer$' -v ./cmd/logbook |
		grep -E 'BOUNCER|REPLICAS cost|fifty_e2e_test|bouncer_e2e_test|^--- |^ok|FAIL|panic'
	exit "${PIPESTATUS[0]}"
fi
if [ "${1:-}" = cost ]; then
	LOGBOOK_COST_REPLICAS="${2:-1,10}" LOGBOOK_LOAD_THREADS="${3:-200}" LOGBOOK_LOAD_RATE="${4:-20}" LOGBOOK_LOAD_DURATION="${5:-30s}" \
		go test -count=1 -timeout 30m -run '^TestE2EReplicaCost$' -v ./cmd/logbook |
		grep -E 'COST|^ +\||/s |/msg |cost_e2e_test|^--- |^ok|FAIL|panic'
	exit "${PIPESTATUS[0]}"
fi
LOGBOOK_LOAD_THREADS="${1:-500}" LOGBOOK_LOAD_RATE="${2:-50}" LOGBOOK_LOAD_DURATION="${3:-1m}" \
	go test -count=1 -timeout 30m -run '^TestE2ETenReplicas$' -v ./cmd/logbook |
	grep -E 'REPLICAS|replicas_e2e_test|e2e_test.go|^--- |^ok|FAIL|panic'
