"""Thread pools of the math libraries in a serving process.

numpy's OpenBLAS starts one thread per core and runs every matrix product it judges large
enough on all of them, and its threads spin for a while after each product before they
sleep. A serving replica's products are small and one request's: a head on one 384-d
vector, the domain head's kNN table (17,546 x 128), a cache's cosines. Their parallelism is
across requests, which the replica already runs concurrently; spinning threads only take the
cores those requests need. Measured on 2 cores, shipped config, 16 clients, short prompts
(bench/bench_stack_cpu.py, docs/performance.md "CPU per process"): the Router's CPU per
routed request 17.7 -> 9.8 ms and the stack's rate 77.5 -> 105 req/s with one BLAS thread.
"""

from __future__ import annotations

import os

from threadpoolctl import threadpool_limits

BLAS_THREADS_ENV = "SVC_SR_BLAS_THREADS"


def limit_blas_threads(environ: dict[str, str] | None = None) -> int:
    """Cap the BLAS pools this process has loaded (numpy's, and any other) at
    `SVC_SR_BLAS_THREADS` threads (default 1); returns the cap. Call at a replica's start,
    after numpy is imported (threadpoolctl limits the libraries loaded so far)."""
    import numpy  # noqa: F401  - loads OpenBLAS, so the limit reaches it

    env = os.environ if environ is None else environ
    threads = max(1, int(env.get(BLAS_THREADS_ENV, "1")))
    threadpool_limits(limits=threads, user_api="blas")
    return threads
