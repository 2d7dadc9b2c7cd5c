#!/usr/bin/env bash
# `make test`: the structure checks, then every test (the whole contract's proof).
#
# `ray up`'s node setup (tests/cluster/test_ray_up_setup.py: a scratch venv pip-installed from the
# local wheel mirror, mostly disk and one core, about 100-250 s) runs in the background beside lint
# and the in-process tests on both cores (unit; contract: both front doors in one process with
# Envoy; stores: Redis, Milvus Lite), none of which starts Ray; its output is printed after them.
# Everything that starts Ray, the CLI's stacks or workers then runs one test at a time: those tests
# measure deadlines, and sharing the 2 cores made them flaky. --durations lists the slowest tests, so CI's budget
# (under 45 minutes) can be kept.
set -uo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
PYTEST=("$VENV/bin/pytest" -q -p no:cacheprovider)
RAY_UP=tests/cluster/test_ray_up_setup.py
mkdir -p .cache
log=.cache/ray-up-setup.log

"${PYTEST[@]}" --durations=5 "$RAY_UP" >"$log" 2>&1 &
ray_up=$!
trap 'kill "$ray_up" 2>/dev/null' EXIT

make --no-print-directory lint || exit 1
"${PYTEST[@]}" -n 2 --durations=10 tests/unit tests/contract tests/stores || exit 1

wait "$ray_up"
setup=$?
trap - EXIT
echo "== $RAY_UP (ran beside lint and the in-process tests)"
cat "$log"
[ "$setup" -eq 0 ] || exit 1

exec "${PYTEST[@]}" --durations=30 --ignore=tests/unit --ignore=tests/contract --ignore=tests/stores \
    --ignore="$RAY_UP" tests
