"""The benchmark dataset loader (app/benchmark/dataset.py): the mini dataset's questions,
answers and token rule, and one clear DatasetError (file, line, what) per kind of bad input."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from app.benchmark.dataset import Dataset, DatasetError, question_text

MINI = Path(__file__).resolve().parents[2] / "fakes" / "benchmark_mini"


def test_mini_dataset_loads_in_file_order_with_the_token_rule():
    dataset = Dataset.load(MINI)
    assert [q.question_id for q in dataset.questions] == [1, 2, 3, 4, 5, 6]
    assert dataset.models == ["big", "mid", "small"]
    assert dataset.categories == ["biology", "law", "math"]
    first = dataset.questions[0]
    assert question_text(first) == "What is the value of 12 divided by 4?"  # the question field alone
    answer = dataset.answer(1, "big")
    assert answer is not None
    # 37 characters: round(37 / 4 + 60) = round(69.25) = 69; 400 output characters: 100 tokens
    assert (answer.pred, answer.correct, answer.output_chars) == ("B", True, 400)
    assert (answer.prompt_tokens, answer.completion_tokens) == (69, 100)
    # question 3 has 86 characters: round(81.5) = 82 (Python rounds halves to even); 300 / 4 = 75
    assert dataset.answer(3, "small") == ("B", True, 300, 82, 75)
    assert dataset.answer(1, "ghost") is None
    expected = hashlib.sha256(
        (MINI / "questions.jsonl").read_bytes() + (MINI / "model_results.csv").read_bytes()
    )
    assert dataset.fingerprint == expected.hexdigest()
    assert dataset.accuracy_by_model() == {"big": 5 / 6, "mid": 4 / 6, "small": 3 / 6}


def test_subset_keeps_file_order_and_refuses_unknown_ids():
    dataset = Dataset.load(MINI)
    part = dataset.subset([5, 2])
    assert [q.question_id for q in part.questions] == [2, 5]
    assert part.answer(2, "mid") is not None and part.answer(1, "mid") is None
    assert part.fingerprint == dataset.fingerprint
    with pytest.raises(DatasetError, match="no question with id 7, 9"):
        dataset.subset([1, 7, 9])


def copy_mini(tmp_path: Path) -> Path:
    target = tmp_path / "data"
    shutil.copytree(MINI, target)
    return target


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))


def append(path: Path, line: str) -> None:
    with path.open("a") as handle:
        handle.write(line + "\n")


QUESTION_7 = {
    "question_id": 7,
    "category": "math",
    "src": "x",
    "question": "q?",
    "options": ["a"],
    "answer": "A",
}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: (d / "questions.jsonl").unlink(), r"questions\.jsonl: missing"),
        (lambda d: (d / "model_results.csv").unlink(), r"model_results\.csv: missing"),
        (
            lambda d: append(d / "questions.jsonl", '{"question_id": 7,'),
            r"questions\.jsonl:7: not valid JSON",
        ),
        (
            lambda d: append(
                d / "questions.jsonl", json.dumps({k: v for k, v in QUESTION_7.items() if k != "category"})
            ),
            r"questions\.jsonl:7: missing field 'category'",
        ),
        (
            lambda d: append(d / "questions.jsonl", json.dumps(QUESTION_7 | {"question_id": "seven"})),
            r"questions\.jsonl:7: field 'question_id'",
        ),
        (
            lambda d: append(d / "questions.jsonl", json.dumps(QUESTION_7 | {"question_id": 6})),
            r"questions\.jsonl:7: duplicate question_id 6",
        ),
        (
            lambda d: edit(
                d / "model_results.csv",
                "question_id,model,pred,correct,output_chars",
                "question_id,model,pred,output_chars",
            ),
            r"model_results\.csv:1: missing column\(s\) correct",
        ),
        (
            lambda d: append(d / "model_results.csv", "1,big,B,1,10"),
            r"model_results\.csv:20: duplicate result for question 1, model 'big'",
        ),
        (
            lambda d: append(d / "model_results.csv", "8,big,B,1,10"),
            r"model_results\.csv:20: question_id 8 is not in questions\.jsonl",
        ),
        (
            lambda d: edit(d / "model_results.csv", "1,mid,B,1,200", "1,mid,B,yes,200"),
            r"model_results\.csv:3: correct must be 0 or 1, got 'yes'",
        ),
        (
            lambda d: edit(d / "model_results.csv", "1,mid,B,1,200", "1,mid,B,1,many"),
            r"model_results\.csv:3: output_chars must be an integer",
        ),
        (
            lambda d: edit(d / "model_results.csv", "1,mid,B,1,200", "1,mid,B,1"),
            r"model_results\.csv:3: 4 fields, the header has 5",
        ),
        (lambda d: (d / "questions.jsonl").write_text(""), r"questions\.jsonl: no questions"),
        (lambda d: append(d / "model_results.csv", '1,big,"B,1,10'), r"model_results\.csv: not valid CSV"),
    ],
)
def test_malformed_datasets_say_where_and_what(tmp_path: Path, change, message):
    directory = copy_mini(tmp_path)
    change(directory)
    with pytest.raises(DatasetError, match=message):
        Dataset.load(directory)


def test_not_a_directory(tmp_path: Path):
    with pytest.raises(DatasetError, match="not a dataset directory"):
        Dataset.load(tmp_path / "nowhere")


def test_a_line_separator_inside_a_question_is_text_not_a_line_break(tmp_path: Path):
    directory = copy_mini(tmp_path)
    append(
        directory / "questions.jsonl", json.dumps(QUESTION_7 | {"question": "a\u2028b"}, ensure_ascii=False)
    )
    assert question_text(Dataset.load(directory).questions[-1]) == "a\u2028b"
