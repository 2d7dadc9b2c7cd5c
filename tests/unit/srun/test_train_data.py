"""`svc-srun train`'s data and arithmetic without training (app/srun/train_data.py, train.py,
train_card.py): rows read from JSON lines and CSV with file:line errors, the seeded
stratified split, BIO targets from character spans, and the card's scores."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from app.srun.train import IGNORE, tags_of, token_targets
from app.srun.train_card import _counts, _scores
from app.srun.train_data import LabelRow, SpanRow, TrainDataError, label_set, read_rows, split
from tests.fakes.labelled_data import sequence_rows, token_rows, write_csv, write_jsonl


def test_jsonl_and_csv_read_the_same_rows(tmp_path):
    rows = token_rows(20)
    from_jsonl = read_rows(write_jsonl(tmp_path / "t.jsonl", rows), "token-classification")
    from_csv = read_rows(write_csv(tmp_path / "t.csv", rows), "token-classification")
    assert from_jsonl == from_csv and len(from_csv) == 20
    assert all(isinstance(r, SpanRow) for r in from_csv)
    seq = read_rows(write_csv(tmp_path / "s.csv", sequence_rows(9)), "sequence-classification")
    assert label_set(seq) == ["billing", "returns", "shipping"]


def test_a_jsonl_text_may_hold_unicode_line_separators(tmp_path):
    """JSON writes U+2028 and U+0085 raw (ensure_ascii off); a line ends at "\n" only."""
    path = tmp_path / "u.jsonl"
    texts = ["one\u2028two", "three\x85four"]
    path.write_text("".join(json.dumps({"text": t, "label": "a"}, ensure_ascii=False) + "\n" for t in texts))
    assert [r.text for r in read_rows(path, "sequence-classification")] == texts


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        ('{"text": "hi"}', "label: Field required"),
        ('{"text": "", "label": "a"}', "text: String should have at least 1 character"),
        ("{not json", "not JSON"),
    ],
)
def test_a_bad_sequence_row_names_file_and_line(tmp_path, line, reason):
    path = tmp_path / "d.jsonl"
    path.write_text('{"text": "fine", "label": "a"}\n' + line + "\n")
    with pytest.raises(TrainDataError, match=reason) as caught:
        read_rows(path, "sequence-classification")
    assert str(caught.value).startswith(f"{path}:2:")


@pytest.mark.parametrize(
    ("spans", "reason"),
    [
        ([{"start": 0, "end": 99, "label": "X"}], "is not inside the text"),
        ([{"start": 0, "end": 4, "label": "X"}, {"start": 2, "end": 6, "label": "Y"}], "overlaps"),
        ([{"start": 0, "end": 4, "label": "B-X"}], "not a BIO tag"),
        ([{"start": 3, "end": 3, "label": "X"}], "is not inside the text"),
    ],
)
def test_bad_spans_are_refused(tmp_path, spans, reason):
    path = write_jsonl(tmp_path / "d.jsonl", [{"text": "mail bob now", "spans": spans}])
    with pytest.raises(TrainDataError, match=reason):
        read_rows(path, "token-classification")


def test_csv_spans_must_be_json(tmp_path):
    path = tmp_path / "d.csv"
    path.write_text('text,spans\nhello,"[{oops"\n')
    with pytest.raises(TrainDataError, match=f"{path}:2: spans is not JSON"):
        read_rows(path, "token-classification")


def test_empty_file(tmp_path):
    (tmp_path / "e.jsonl").write_text("\n\n")
    with pytest.raises(TrainDataError, match="no rows"):
        read_rows(tmp_path / "e.jsonl", "sequence-classification")


def test_split_is_seeded_and_stratified():
    rows = [LabelRow.model_validate(r) for r in sequence_rows(90)] + [LabelRow(text="lone", label="rare")]
    train, held = split(rows, 0.2, seed=3)
    assert split(rows, 0.2, seed=3) == (train, held) and split(rows, 0.2, seed=4) != (train, held)
    assert Counter(r.label for r in held) == {"billing": 6, "returns": 6, "shipping": 6}
    assert sorted(map(id, train + held)) == sorted(map(id, rows))  # every row once
    assert any(r.label == "rare" for r in train)  # one row: trained on, never held out


def test_token_targets_tag_a_spans_first_token_b_and_the_rest_i():
    row = SpanRow(text="mail bob.stone@x.org now", spans=[{"start": 5, "end": 20, "label": "EMAIL"}])
    tags = tags_of("token-classification", ["EMAIL"])
    assert tags == ["O", "B-EMAIL", "I-EMAIL"]
    offsets = [
        (0, 0),
        (0, 4),
        (5, 8),
        (8, 9),
        (9, 14),
        (14, 15),
        (15, 16),
        (16, 17),
        (17, 20),
        (21, 24),
        (0, 0),
    ]
    got = [tags[t] if t != IGNORE else None for t in token_targets(row, offsets, tags)]
    assert got == [None, "O", "B-EMAIL", *["I-EMAIL"] * 6, "O", None]


def test_scores_count_spans_exactly_and_labels_per_class():
    gold = [
        SpanRow(
            text="bob at a@b.c",
            spans=[{"start": 0, "end": 3, "label": "PERSON"}, {"start": 7, "end": 12, "label": "EMAIL"}],
        )
    ]
    answers = [frozenset({("PERSON", 0, 3), ("EMAIL", 7, 11)})]  # the e-mail's end is off by one
    scores, micro, macro = _scores(_counts(gold, answers, ["EMAIL", "PERSON"]))
    by = {s.label: s for s in scores}
    assert (by["PERSON"].f1, by["EMAIL"].f1, by["EMAIL"].support) == (1.0, 0.0, 1)
    assert micro == pytest.approx(0.5) and macro == pytest.approx(0.5)
    rows = [LabelRow(text="x", label=label) for label in ("a", "a", "b")]
    scores, micro, _ = _scores(_counts(rows, ["a", "b", "b"], ["a", "b"]))
    by = {s.label: s for s in scores}
    assert by["a"].precision == 1.0 and by["a"].recall == 0.5 and by["b"].precision == 0.5
    assert micro == pytest.approx(2 / 3)
    assert json.loads(json.dumps([s.model_dump() for s in scores]))[0]["label"] == "a"
