#!/usr/bin/env bash
# Search latency on a seeded log against a bare full-text query on the same data, in one run.
# LOGBOOK_BENCH_EVENTS sets the size (default 50,000; the issue's figure is 1,000,000), and
# LOGBOOK_BENCH_DATABASE_URL keeps a seeded database between runs: see
# session/search/searchbench/README.md.
set -euo pipefail
cd "$(dirname "$0")/.."
go test -run '^$' -bench SearchLatency -benchtime 1x -timeout 60m "$@" ./session/search/searchbench
