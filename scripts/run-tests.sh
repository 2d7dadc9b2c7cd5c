#!/usr/bin/env bash
# `make test`: the structure checks, then every test (the whole contract's proof).
#
# Lint and the in-process tests (unit; contract: both front doors in one process with Envoy;
# stores: Redis, Milvus Lite), none of which starts Ray, run on both cores. Everything that starts
# Ray, the CLI's stacks or workers then runs one test at a time: those tests measure deadlines,
# and sharing the 2 cores made them flaky. `ray up`'s node setup (tests/cluster/test_ray_up_setup.py:
# a scratch venv pip-installed from the local wheel mirror) proves the cluster file's packaging, not
# the contract: it runs in `make test-cluster` (it cost CI ~200 s of a 45-minute budget).
# --durations lists the slowest tests (every one of the serial part, ~220), so CI's budget can be kept.
set -uo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
PYTEST=("$VENV/bin/pytest" -q -p no:cacheprovider)

make --no-print-directory lint || exit 1
"${PYTEST[@]}" -n 2 --durations=25 tests/unit tests/contract tests/stores || exit 1

exec "${PYTEST[@]}" --durations=0 --ignore=tests/unit --ignore=tests/contract --ignore=tests/stores \
    --ignore=tests/cluster/test_ray_up_setup.py tests
