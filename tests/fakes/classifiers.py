"""A fake ClassifierSource (app/api/diagnostics_service.py) for the diagnostics routes: domain,
PII and jailbreak answers from a few trigger phrases, every call recorded, optional failure
or delay."""

from __future__ import annotations

import asyncio
import hashlib
from typing import Any

import numpy as np

from app.models.domain import DOMAIN_CATEGORIES


class FakeBackend:
    def __init__(
        self, fail: BaseException | None = None, delay_s: float = 0.0, preview_fails: bool = False
    ) -> None:
        self.fail = fail
        self.delay_s = delay_s
        self.preview_fails = preview_fails
        self.calls: list[tuple[str, dict[str, Any]]] = []

    async def _enter(self, name: str, **args: Any) -> None:
        self.calls.append((name, args))
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        if self.fail is not None:
            raise self.fail

    async def classify_domain(self, texts, threshold, fallback_category):
        await self._enter("domain", texts=texts, threshold=threshold, fallback=fallback_category)
        out = []
        for text in texts:
            probs = {c: 0.02 for c in DOMAIN_CATEGORIES}
            if "integral" in text:
                probs |= {"math": 0.74}
            elif "contract" in text:
                probs |= {"law": 0.5}
            else:
                probs |= {"other": 0.3}
            best = max(probs, key=probs.__getitem__)
            category = best if threshold is None or probs[best] >= threshold else fallback_category
            out.append({"category": category, "confidence": probs[best], "probabilities": probs})
        return out

    async def detect_pii(self, texts, entity_types, threshold):
        await self._enter("pii", texts=texts, entity_types=entity_types, threshold=threshold)
        out = []
        for text in texts:
            entities = []
            at = text.find("jane@example.com")
            if at >= 0 and (not entity_types or "EMAIL_ADDRESS" in entity_types):
                entities.append(
                    {
                        "type": "EMAIL_ADDRESS",
                        "value": "jane@example.com",
                        "confidence": 0.95,
                        "start": at,
                        "end": at + 16,
                        "masked_value": "<EMAIL_ADDRESS>",
                    }
                )
            masked = text.replace("jane@example.com", "<EMAIL_ADDRESS>") if entities else text
            out.append({"has_pii": bool(entities), "entities": entities, "masked_text": masked})
        return out

    async def detect_jailbreak(self, texts, method, threshold, jailbreak_patterns, benign_patterns):
        await self._enter("jailbreak", texts=texts, method=method, threshold=threshold)
        limit = 0.5 if threshold is None else threshold
        out = []
        for text in texts:
            score = 0.93 if "ignore all previous" in text else 0.4 if "roleplay" in text else 0.02
            flagged = score >= limit
            out.append(
                {
                    "is_jailbreak": flagged,
                    "score": score,
                    "confidence": score if flagged else 1 - score,
                    "method": method,
                    "patterns_detected": ["ignore_previous_instructions"] if score > 0.9 else [],
                    "detection_types": ["instruction_override", "prompt_injection"] if flagged else [],
                }
            )
        return out

    async def embed(self, texts):
        """Unit vectors seeded by each text (the Embedding deployment's shape, not its meaning)."""
        await self._enter("embed", texts=texts)
        rows = []
        for text in texts:
            seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big")
            row = np.random.default_rng(seed).standard_normal(384).astype(np.float32)
            rows.append(row / np.linalg.norm(row))
        return np.stack(rows)

    async def preview(self, text):
        self.calls.append(("preview", {"text": text}))
        if self.preview_fails:
            raise RuntimeError("router down")
        return {"selected_model": "model-a", "decision": "math_route"}
