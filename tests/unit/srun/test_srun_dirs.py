"""The worker's checks before it loads a model directory (app/srun/admission.py): family,
memory budget and the --offline start check read the directory's small files only."""

from __future__ import annotations

import shutil

import pytest

from app.runtime.schemas import NotReady
from app.srun.admission import admit, offline_problems
from app.srun.worker import model_ref
from tests.fakes.tiny_models import write_tiny_sequence_classifier

COMMIT = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture(scope="module")
def intent(tmp_path_factory):
    return write_tiny_sequence_classifier(tmp_path_factory.mktemp("m") / "intent", ["a", "b"])


def test_family_and_memory_budget_apply_to_directories(intent):
    admit(str(intent), "auto", "cpu", family="label_probabilities", memory_budget_gib=1.0)
    with pytest.raises(NotReady, match="is a label_probabilities model; family 'embeddings'"):
        admit(str(intent), "auto", "cpu", family="embeddings")
    with pytest.raises(NotReady, match="above the memory budget of 1e-06 GiB"):
        admit(str(intent), "auto", "cpu", memory_budget_gib=1e-6)


def test_offline_problems_of_directories(intent, tmp_path):
    bad = shutil.copytree(intent, tmp_path / "bad")
    (bad / "config.json").unlink()
    problems = offline_problems([(str(intent), "auto", "cpu"), (str(bad), "auto", "cpu")])
    assert problems == [f"{bad}: missing config.json"]


def test_a_pin_picks_a_repositorys_snapshot_and_is_checked_after_for_the_rest(intent):
    assert model_ref("acme/intent", COMMIT) == f"acme/intent@{COMMIT}"
    assert model_ref(str(intent), "abc1234") == str(intent)  # a digest prefix, checked on the card
    assert model_ref("domain-classifier", "x") == "domain-classifier"
    assert model_ref("acme/intent", None) == "acme/intent"
