"""Choose the prompt guard's uncertain band for the guard encoder (docs/security.md, "The
encoder cascade") on the TUNING rows only (scripts/train_guard_encoder.py writes them:
the sources' validation parts and the hand-written dev halves; no held-out text).

1. every tuning row goes through the shipped config's `RouterPipeline.route()` (offline, no
   Ray), cascade off: the global guard's jailbreak and harmful scores and thresholds, and
   whether a PII check refused it (cached in `--scores`);
2. the guard encoder scores each text (int8 ONNX, as served);
3. for each band [low, high) of each head, each encoder cut and each `clear` cut (a band that
   reaches above the head's threshold is two-sided: a head's block there stands unless the
   encoder scores below `clear`, by default the cut), the cascade is replayed on those
   scores: attacks caught, ordinary rows refused, and the share of ordinary rows that pay the
   encoder pass. Printed best first: the most caught with no more refused than the shipped
   heads alone. The documented band (jailbreak [0.1, 1.0), harmful [0.15, 0.7), cut 0.9,
   `guard_cut.json`) is, of those within 0.25 points of the best catch, the one that sends the
   fewest ordinary rows to the encoder (printed on its own line).

    .venv/bin/python scripts/train_guard_encoder.py --rows-only --hard-negatives --out /tmp/rows
    .venv/bin/python scripts/tune_guard_band.py --rows /tmp/rows/tuning.jsonl \
        --encoder app/models/artifacts/guard_encoder --scores /tmp/tuning-scores.json

`--unread` chooses `cascade_band_unread`'s cut instead: only the rows in a language the heads do
not read (app/models/language.py `read_by_english_heads`), every score judged (band [0, 1)).
`--encoder` may name the multilingual guard's directory (scripts/train_multilingual_guard.py).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import random
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from app.benchmark.local_services import local_services, shared_vector_table  # noqa: E402
from app.benchmark.runner import AUTO_MODEL, as_config  # noqa: E402
from app.models.language import read_by_english_heads  # noqa: E402
from app.pipeline.pipeline import RouterPipeline  # noqa: E402
from app.pipeline.selection import RoutingError  # noqa: E402

JB, HARM = "global:prompt_guard", "global:prompt_guard:harmful"
LOWS = (0.0, 0.02, 0.05, 0.1, 0.15, 0.2, 0.3)
HIGHS = (0.5, 0.7, 0.9, 1.0)
CUTS = (0.5, 0.7, 0.8, 0.9, 0.95, 0.98, 0.99, 0.995)
# the encoder score below which it lifts a head's block in a two-sided band (None: the cut)
CLEARS = (None, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5)


async def head_scores(config: str, texts: list[str]) -> list[dict]:
    """The shipped guard's verdict per text, the cascade left off."""
    loaded = as_config(config)
    table = shared_vector_table()
    local = local_services(loaded, table)
    out: list[dict] = []
    try:
        pipeline = RouterPipeline(loaded, local.services, rng=random.Random(0))
        await pipeline.warm_up()
        await table.fill(texts)

        async def one(i: int, text: str) -> dict:
            body = {"model": AUTO_MODEL, "messages": [{"role": "user", "content": text}]}
            row: dict = {"pii": False}
            try:
                plan = await pipeline.route(body, {}, f"tune-{i}")
            except RoutingError:
                return row
            for m in plan.signals.matches:
                if m.name in (JB, HARM) and not m.error:
                    tag = "jb" if m.name == JB else "harm"
                    row[tag] = float(m.confidence)
                    row[f"{tag}_t"] = float(m.detail.get("threshold", 0.5))
            body_ = plan.immediate.body if plan.immediate is not None else None
            code = (body_ or {}).get("error", {}).get("code") if isinstance(body_, dict) else None
            row["pii"] = code == "pii_detected"
            return row

        for lo in range(0, len(texts), 32):
            out += await asyncio.gather(*(one(lo + i, t) for i, t in enumerate(texts[lo : lo + 32])))
            print(f"[heads] {len(out)}/{len(texts)}", file=sys.stderr, flush=True)
    finally:
        await local.aclose()
    return out


def encoder_scores(directory: str, texts: list[str]) -> list[float]:
    """The band judge's attack scores: the guard encoder's, or the multilingual guard's when
    `directory` holds its head (app/models/multilingual.py)."""
    from app.models.guard_encoder import GuardEncoder
    from app.models.multilingual import HEAD_FILE, MultilingualGuard

    path = Path(directory)
    encoder = MultilingualGuard.load(path) if (path / HEAD_FILE).is_file() else GuardEncoder.load(path)
    order = sorted(range(len(texts)), key=lambda i: len(texts[i]))  # batches of like length
    scores = [0.0] * len(texts)
    for lo in range(0, len(order), 16):
        chunk = order[lo : lo + 16]
        for i, score in zip(chunk, encoder.attack_scores([texts[i] for i in chunk]), strict=True):
            scores[i] = score
    return scores


_COLUMNS: dict[int, dict[str, np.ndarray]] = {}


def columns(rows: list[dict]) -> dict[str, np.ndarray]:
    """The recorded scores as arrays (once per list: the grid replays it tens of thousands of times)."""
    if id(rows) not in _COLUMNS:
        cols = {"pii": np.array([bool(r["pii"]) for r in rows])}
        for tag in ("jb", "harm"):
            cols[tag] = np.array([r.get(tag, np.nan) for r in rows], dtype=float)
            cols[f"{tag}_t"] = np.array([r.get(f"{tag}_t", 0.5) for r in rows], dtype=float)
        _COLUMNS[id(rows)] = cols
    return _COLUMNS[id(rows)]


def replay(
    rows: list[dict], enc: np.ndarray, band_j, band_h, cut: float | None, clear: float | None = None
) -> dict:
    """The cascade on recorded scores: per row, refused or not, and whether it paid the encoder.
    In a band, a score below the head's threshold is flagged when the encoder reaches `cut`; one
    at or above it (the head blocks) stays flagged unless the encoder falls below `clear`
    (default: `cut`, the one-cut judge)."""
    clear = cut if clear is None else clear
    cols = columns(rows)
    refused = cols["pii"].copy()
    paid = np.zeros(len(rows), dtype=bool)
    for tag, band in (("jb", band_j), ("harm", band_h)):
        s, t = cols[tag], cols[f"{tag}_t"]
        head = s >= t  # NaN (no score) compares False: not flagged, not judged
        if cut is None or band is None:
            refused |= head
            continue
        judged = (s >= band[0]) & (s < band[1])
        encoder = np.where(head, enc >= clear, enc >= cut)
        refused |= np.where(judged, encoder, head)
        paid |= judged
    return {"refused": refused, "paid": paid}


def print_choices(rows, heads, enc, attack, base, results, top: int) -> None:
    """The best bands under each rule: no more ordinary rows refused than the heads alone,
    overall; and that, in every source too (a gain on one source's noisy labels must not hide
    new refusals of another's)."""
    sources = np.array([r["source"] for r in rows])
    benign_sources = sorted(set(sources[~attack]))

    def fair(band_j, band_h, cut, clear) -> bool:
        ref = replay(heads, enc, band_j, band_h, cut, clear)["refused"]
        return all(
            ref[~attack & (sources == s)].sum() <= base[~attack & (sources == s)].sum()
            for s in benign_sources
        )

    allowed = [r for r in sorted(results, key=lambda r: r[:3], reverse=True) if -r[1] <= base[~attack].mean()]
    print("-- no more ordinary rows refused overall (the rule of the documented band):")
    for r in allowed[:top]:
        print(line(r))
    best = allowed[0][0] if allowed else 0.0
    near = [r for r in allowed if r[0] >= best - 0.0025]
    if near:
        print(
            "-- of those within 0.25 points of the best catch, the fewest ordinary rows paying the encoder:"
        )
        print(line(max(near, key=lambda r: (r[2], r[1], r[0]))))
    print("-- and none more in any source (tried, not kept: docs/security.md):")
    for r in [r for r in allowed[: top * 20] if fair(r[3], r[4], r[5], r[6])][:top]:
        print(line(r))


def line(r: tuple) -> str:
    return (
        f"band jb {r[3]} harm {r[4]} cut {r[5]} clear {r[6]}: "
        f"caught {r[0]:.4f} refused {-r[1]:.4f} paid {-r[2]:.4f}"
    )


def per_row_cache(path: Path, rows: int, compute: Callable[[], list]) -> list:
    """One entry per row: read from `path` when it is there, else computed and written. A cache
    written for other rows (another rows file, or the same one with or without `--unread`) is
    refused rather than replayed against the wrong rows."""
    if not path.is_file():
        values = compute()
        path.write_text(json.dumps(values))
        return values
    values = json.loads(path.read_text())
    if len(values) != rows:
        raise SystemExit(f"{path} holds {len(values)} rows' scores, not {rows}: a cache of other rows")
    return values


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=Path, required=True)
    ap.add_argument("--encoder", type=str, default=None)
    ap.add_argument("--scores", type=Path, required=True, help="cache of the heads' scores")
    ap.add_argument("--config", default=str(ROOT / "configs" / "config.yaml"))
    ap.add_argument("--top", type=int, default=15)
    ap.add_argument(
        "--unread",
        action="store_true",
        help="`cascade_band_unread`: only the rows the heads do not read, judged in the whole band [0, 1)",
    )
    args = ap.parse_args(argv)
    rows = [json.loads(line) for line in args.rows.read_text(encoding="utf-8").split("\n") if line.strip()]
    if args.unread:
        rows = [r for r in rows if not read_by_english_heads(r["text"])]
    lows, highs = ((0.0,), (1.0,)) if args.unread else (LOWS, HIGHS)
    texts = [r["text"] for r in rows]
    heads = per_row_cache(args.scores, len(rows), lambda: asyncio.run(head_scores(args.config, texts)))
    attack = np.array([r["label"] != "benign" for r in rows])
    base = replay(heads, np.zeros(len(rows)), None, None, None)["refused"]
    print(f"heads alone: caught {base[attack].mean():.4f} of {attack.sum()}, "
          f"refused {base[~attack].mean():.4f} of {(~attack).sum()}")  # fmt: skip
    if args.encoder is None:
        return 0
    enc = np.array(
        per_row_cache(
            args.scores.with_suffix(".encoder.json"), len(rows), lambda: encoder_scores(args.encoder, texts)
        )
    )
    for cut in CUTS:
        flag = enc >= cut
        print(f"encoder alone @{cut}: caught {flag[attack].mean():.4f}, refused {flag[~attack].mean():.4f}")
    results = []
    for lj, hj, lh, hh, cut, clear in itertools.product(lows, highs, lows, highs, CUTS, CLEARS):
        if lj >= hj or lh >= hh or (clear is not None and clear >= cut):
            continue
        out = replay(heads, enc, (lj, hj), (lh, hh), cut, clear)
        ref = out["refused"]
        results.append((ref[attack].mean(), -ref[~attack].mean(), -out["paid"][~attack].mean(),
                        (lj, hj), (lh, hh), cut, clear))  # fmt: skip
    print_choices(rows, heads, enc, attack, base, results, args.top)
    by_source: dict[str, list[int]] = {}
    for r, b in zip(rows, base, strict=True):
        by_source.setdefault(f"{r['label']}/{r['source']}", []).append(int(b))
    print(json.dumps({k: f"{sum(v)}/{len(v)}" for k, v in sorted(by_source.items())}, indent=0))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
