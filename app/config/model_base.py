"""Base classes of the configuration models: strict and open sections.

Sections svc-sr implements are strict (`extra="forbid"`: a typo is a rejection that
names the path); sections of the reference router that svc-sr does not implement yet
are open, so a reference file still loads and `validate.py` warns about them.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class Open(BaseModel):
    """A section whose unknown keys are kept (reference features svc-sr does not act on)."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)
