#!/usr/bin/env bash
# Measures the session log against raw PostgreSQL in one run on one database:
# single-event appends at 1, 8 and 32 concurrent sessions (events/s, p50/p99) against a raw
# single-row INSERT into an identically shaped table, and reading a 10,000-event session
# through the API against a raw SELECT. Needs the test server (see README).
set -euo pipefail
cd "$(dirname "$0")/.."
go test -run '^$' -bench '^BenchmarkLog$' -benchtime=1x -count="${COUNT:-1}" ./session | grep -E 'append sessions|read 10,000|^ok|FAIL'
