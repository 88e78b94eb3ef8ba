#!/usr/bin/env bash
# Runs one Python test of the package: run_test.sh TEST.py PYTHONPATH_DIR TRACECACHE_BINARY
# With /usr/bin/python3 (Debian's, which has numpy and torch), the package from PYTHONPATH_DIR,
# TRACECACHE_DB in a fresh temporary directory (never the user's cache) and TRACECACHE_CLI naming
# the tracecache command, for tests that compare with it.
set -euo pipefail
test_file=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export PYTHONPATH=$2${PYTHONPATH:+:$PYTHONPATH}
export TRACECACHE_DB=$tmp/cache.db
export TRACECACHE_CLI=$3
export TRACECACHE_TEST_TMP=$tmp
cd "$tmp"
/usr/bin/python3 "$test_file"
