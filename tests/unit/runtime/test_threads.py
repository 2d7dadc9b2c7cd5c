"""limit_blas_threads: a serving replica's BLAS pool is capped, by default at one thread."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from threadpoolctl import ThreadpoolController

from app.runtime.threads import BLAS_THREADS_ENV, limit_blas_threads


@pytest.fixture(autouse=True)
def restored_blas() -> Iterator[None]:
    """Each test's cap is undone after it: the pools are the whole test process's."""
    before = {lib.filepath: lib.num_threads for lib in blas_pools()}
    yield
    for lib in blas_pools():
        lib.set_num_threads(before.get(lib.filepath, lib.num_threads))


def blas_pools() -> list:
    return list(ThreadpoolController().select(user_api="blas").lib_controllers)


def blas_threads() -> set[int]:
    return {lib.num_threads for lib in blas_pools()}


def test_one_thread_by_default() -> None:
    assert limit_blas_threads({}) == 1
    assert blas_threads() == {1}  # numpy's OpenBLAS is loaded, and capped


def test_the_variable_sets_the_cap() -> None:
    limit_blas_threads({})
    assert limit_blas_threads({BLAS_THREADS_ENV: "2"}) == 2
    assert blas_threads() == {2}


def test_a_cap_below_one_is_one() -> None:
    assert limit_blas_threads({BLAS_THREADS_ENV: "0"}) == 1
    assert blas_threads() == {1}
