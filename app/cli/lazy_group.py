"""A click group whose command modules are imported when a command is used.

Importing every command module (the benchmark, config and KubeRay ones pull in the config
models, numpy and the management service) took 1.1 s on 2 cores before any command ran, which
`svc-sr stop` and `svc-sr status` paid on every call. A group lists each lazy command by name with
where it comes from: a click command, or a `register(group)` function that adds several.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

import click


class LazyGroup(click.Group):
    def __init__(self, *args: Any, lazy: Mapping[str, str] | None = None, **kwargs: Any) -> None:
        """`lazy`: command name -> "module:attribute", a click command or a registrar."""
        super().__init__(*args, **kwargs)
        self.lazy = dict(lazy or {})

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.lazy})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = self.lazy.pop(cmd_name, None)
        if target is not None:
            self._load(target)
        return super().get_command(ctx, cmd_name)

    def _load(self, target: str) -> None:
        module, attribute = target.split(":")
        loaded = getattr(importlib.import_module(module), attribute)
        if isinstance(loaded, click.Command):
            self.add_command(loaded)
            return
        loaded(self)  # a registrar: the other names it adds are loaded now too
        for name in [n for n, t in self.lazy.items() if t == target]:
            del self.lazy[name]
