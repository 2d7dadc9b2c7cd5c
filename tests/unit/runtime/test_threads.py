"""limit_blas_threads: a serving replica's BLAS pool is capped, by default at one thread."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from threadpoolctl import ThreadpoolController

from app.runtime.threads import BLAS_THREADS_ENV, limit_blas_threads


@pytest.fixture
def blas() -> Iterator[ThreadpoolController]:
    controller = ThreadpoolController()
    before = {lib.filepath: lib.num_threads for lib in controller.select(user_api="blas").lib_controllers}
    yield controller
    for lib in ThreadpoolController().select(user_api="blas").lib_controllers:
        lib.set_num_threads(before.get(lib.filepath, lib.num_threads))


def blas_threads(controller: ThreadpoolController) -> set[int]:
    return {lib.num_threads for lib in ThreadpoolController().select(user_api="blas").lib_controllers}


def test_one_thread_by_default(blas: ThreadpoolController) -> None:
    assert limit_blas_threads({}) == 1
    assert blas_threads(blas) == {1}  # numpy's OpenBLAS is loaded, and capped


def test_the_variable_sets_the_cap(blas: ThreadpoolController) -> None:
    limit_blas_threads({})
    assert limit_blas_threads({BLAS_THREADS_ENV: "2"}) == 2
    assert blas_threads(blas) == {2}


def test_a_cap_below_one_is_one(blas: ThreadpoolController) -> None:
    assert limit_blas_threads({BLAS_THREADS_ENV: "0"}) == 1
    assert blas_threads(blas) == {1}
