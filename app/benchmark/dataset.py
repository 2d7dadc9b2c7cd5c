"""A benchmark dataset: questions and the recorded answers of several models to them.

A dataset is a directory in the ../shared/data/mmlu-pro format:
- `questions.jsonl`: one JSON object a line, `question_id, category, src, question, options[],
  answer`;
- `model_results.csv`: `question_id, model, pred, correct, output_chars` (header first; other
  columns are ignored), at most one row per (question, model).

Anything malformed raises `DatasetError` naming the file, the line and what is wrong, so the
CLI can answer with one clear message (exit 2) instead of a traceback.

The token rule (issue 17), which makes costs comparable without the prompts the models saw:
prompt_tokens = round(len(question) / 4 + 60) (the question text, plus 60 for the template),
completion_tokens = round(output_chars / 4).

Loading uses the csv module, not pandas: the shared dataset (10,583 questions, 105,830
results) loads in well under two seconds.
"""

from __future__ import annotations

import csv
import hashlib
import io
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import NamedTuple

from pydantic import BaseModel, ConfigDict, ValidationError

QUESTIONS_FILE = "questions.jsonl"
RESULTS_FILE = "model_results.csv"
RESULT_COLUMNS = ("question_id", "model", "pred", "correct", "output_chars")
TEMPLATE_TOKENS = 60
CHARS_PER_TOKEN = 4


class DatasetError(ValueError):
    """A dataset directory that cannot be used; the message says where and why."""


class Question(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    question_id: int
    category: str
    src: str
    question: str
    options: list[str]
    answer: str


class RecordedAnswer(NamedTuple):
    """One model's recorded answer to one question, with the token rule's counts."""

    pred: str
    correct: bool
    output_chars: int
    prompt_tokens: int
    completion_tokens: int


def question_text(question: Question) -> str:
    """What the router sees: the question alone, as a user would ask it. The token rule and
    the learned selectors' training use exactly this string."""
    return question.question


def prompt_tokens(question: Question) -> int:
    return round(len(question.question) / CHARS_PER_TOKEN + TEMPLATE_TOKENS)


def completion_tokens(output_chars: int) -> int:
    return round(output_chars / CHARS_PER_TOKEN)


class Dataset:
    """Questions in file order, models sorted, answers by (question_id, model)."""

    def __init__(
        self,
        path: Path,
        questions: list[Question],
        answers: Mapping[tuple[int, str], RecordedAnswer],
        models: list[str],
        fingerprint: str,
    ) -> None:
        self.path = path
        self.questions = questions
        self.answers = answers
        self.models = models
        self.fingerprint = fingerprint  # sha256 of questions.jsonl then model_results.csv
        self._by_id = {q.question_id: q for q in questions}

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def categories(self) -> list[str]:
        return sorted({q.category for q in self.questions})

    @classmethod
    def load(cls, path: Path) -> Dataset:
        """Load and validate the dataset directory at `path`; DatasetError on bad input."""
        path = Path(path)
        if not path.is_dir():
            raise DatasetError(
                f"{path}: not a dataset directory (expected {QUESTIONS_FILE} and {RESULTS_FILE})"
            )
        question_bytes = _read(path / QUESTIONS_FILE)
        result_bytes = _read(path / RESULTS_FILE)
        questions = _parse_questions(path / QUESTIONS_FILE, question_bytes)
        try:
            answers = _parse_results(path / RESULTS_FILE, result_bytes, {q.question_id: q for q in questions})
        except csv.Error as exc:  # a stray quote, a NUL byte
            raise DatasetError(f"{path / RESULTS_FILE}: not valid CSV ({exc})") from None
        digest = hashlib.sha256(question_bytes)
        digest.update(result_bytes)
        models = sorted({model for _, model in answers})
        return cls(path.resolve(), questions, answers, models, digest.hexdigest())

    def question(self, question_id: int) -> Question | None:
        return self._by_id.get(question_id)

    def answer(self, question_id: int, model: str) -> RecordedAnswer | None:
        return self.answers.get((question_id, model))

    def subset(self, question_ids: Iterable[int]) -> Dataset:
        """These questions (in file order) and their answers; DatasetError for an unknown id.
        The fingerprint stays the whole dataset's: a subset is named by it plus its ids."""
        wanted = set(question_ids)
        unknown = sorted(wanted - self._by_id.keys())
        if unknown:
            shown = ", ".join(str(i) for i in unknown[:10])
            more = f" and {len(unknown) - 10} more" if len(unknown) > 10 else ""
            raise DatasetError(f"{self.path}: no question with id {shown}{more}")
        questions = [q for q in self.questions if q.question_id in wanted]
        answers = {key: value for key, value in self.answers.items() if key[0] in wanted}
        return Dataset(self.path, questions, answers, self.models, self.fingerprint)

    def accuracy_by_model(self) -> dict[str, float]:
        """Each model's share of right answers over the questions it answered."""
        right: dict[str, int] = dict.fromkeys(self.models, 0)
        seen: dict[str, int] = dict.fromkeys(self.models, 0)
        for (_, model), recorded in self.answers.items():
            seen[model] += 1
            right[model] += int(recorded.correct)
        return {model: right[model] / seen[model] if seen[model] else 0.0 for model in self.models}


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise DatasetError(f"{path}: missing") from None
    except OSError as exc:
        raise DatasetError(f"{path}: cannot read ({exc.strerror or type(exc).__name__})") from None


def _text(path: Path, data: bytes) -> str:
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise DatasetError(f"{path}: not UTF-8 text (byte {exc.start})") from None


def _parse_questions(path: Path, data: bytes) -> list[Question]:
    questions: list[Question] = []
    seen: set[int] = set()
    # split on newlines only: str.splitlines() also splits inside strings at U+2028 and kin
    for number, line in enumerate(_text(path, data).split("\n"), start=1):
        if not line.strip():
            continue
        try:
            question = Question.model_validate_json(line)
        except ValidationError as exc:
            raise DatasetError(f"{path}:{number}: {_first_error(exc)}") from None
        if question.question_id in seen:
            raise DatasetError(f"{path}:{number}: duplicate question_id {question.question_id}")
        seen.add(question.question_id)
        questions.append(question)
    if not questions:
        raise DatasetError(f"{path}: no questions")
    return questions


def _first_error(exc: ValidationError) -> str:
    error = exc.errors()[0]
    if error["type"].startswith("json"):
        return f"not valid JSON ({error['msg']})"
    where = ".".join(str(part) for part in error["loc"])
    if error["type"] == "missing":
        return f"missing field {where!r}"
    return f"field {where!r}: {error['msg']}"


def _parse_results(
    path: Path, data: bytes, questions: Mapping[int, Question]
) -> dict[tuple[int, str], RecordedAnswer]:
    # newline="": a quoted field may hold newlines; strict: a stray quote is an error, not data
    reader = csv.reader(io.StringIO(_text(path, data), newline=""), strict=True)
    header = next(reader, None)
    if header is None:
        raise DatasetError(f"{path}: empty (expected the header {','.join(RESULT_COLUMNS)})")
    names = [name.strip() for name in header]
    missing = [column for column in RESULT_COLUMNS if column not in names]
    if missing:
        raise DatasetError(f"{path}:1: missing column(s) {', '.join(missing)}")
    columns = [names.index(column) for column in RESULT_COLUMNS]
    prompt = {qid: prompt_tokens(q) for qid, q in questions.items()}
    answers: dict[tuple[int, str], RecordedAnswer] = {}
    for row in reader:
        number = reader.line_num
        if not row:
            continue
        if len(row) != len(names):
            raise DatasetError(f"{path}:{number}: {len(row)} fields, the header has {len(names)}")
        raw_id, model, pred, raw_correct, raw_chars = (row[i] for i in columns)
        question_id = _integer(path, number, "question_id", raw_id)
        if question_id not in prompt:
            raise DatasetError(f"{path}:{number}: question_id {question_id} is not in {QUESTIONS_FILE}")
        if not model:
            raise DatasetError(f"{path}:{number}: empty model")
        if raw_correct not in ("0", "1"):
            raise DatasetError(f"{path}:{number}: correct must be 0 or 1, got {raw_correct!r}")
        chars = _integer(path, number, "output_chars", raw_chars)
        if chars < 0:
            raise DatasetError(f"{path}:{number}: output_chars must not be negative, got {chars}")
        key = (question_id, model)
        if key in answers:
            raise DatasetError(
                f"{path}:{number}: duplicate result for question {question_id}, model {model!r}"
            )
        answers[key] = RecordedAnswer(
            pred, raw_correct == "1", chars, prompt[question_id], completion_tokens(chars)
        )
    return answers


def _integer(path: Path, number: int, column: str, raw: str) -> int:
    try:
        return int(raw)
    except ValueError:
        raise DatasetError(f"{path}:{number}: {column} must be an integer, got {raw!r}") from None
