#!/usr/bin/env bash
# Search latency on a seeded log against a bare full-text query on the same data, in one run.
# LOGBOOK_BENCH_EVENTS sets the size (default 50,000; issue 53's figure is 10,000,000, seeded in
# about 12 minutes), LOGBOOK_BENCH_DATABASE_URL keeps a seeded database between runs
# (LOGBOOK_BENCH_SEED_ONLY=1 seeds it and times nothing), LOGBOOK_BENCH_FLOOR=off leaves out the
# floor query: see session/search/searchbench/README.md.
set -euo pipefail
cd "$(dirname "$0")/.."
go test -run '^$' -bench SearchLatency -benchtime 1x -timeout 60m "$@" ./session/search/searchbench
