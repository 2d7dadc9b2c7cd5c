"""`python -m app.local_llm install|start|stop|status|restart` (scripts/local-llm.sh wraps it)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from app.local_llm import install as engine
from app.local_llm.settings import LocalLLMError, LocalLLMSettings
from app.local_llm.supervisor import start, status, stop

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_NOT_RUNNING = 3  # LSB convention for `status` of a stopped service


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="local-llm", description="the local demo LLM (docs/local-llm.md)")
    parser.add_argument("command", choices=["install", "start", "stop", "status", "restart"])
    parser.add_argument("--timeout", type=float, default=180.0, help="seconds to wait for readiness")
    parser.add_argument("--reinstall", action="store_true", help="install: replace the engine's install")
    args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    try:
        settings = LocalLLMSettings.from_env()
        if args.command == "install":
            engine.ensure_model_packages()
            modules = engine.install(settings, reinstall=args.reinstall)
            print(f"demo LLM engine installed: {modules.parent}")
            return EXIT_OK
        if args.command == "status":
            st = status(settings)
            print(st.message)
            if st.running:
                print(f"log: {settings.log_file}")
            return EXIT_OK if st.ready else EXIT_NOT_RUNNING
        if args.command in ("stop", "restart"):
            print(stop(settings).message)
            if args.command == "stop":
                return EXIT_OK
        st = start(settings, ready_timeout=args.timeout, modules=engine.installed_modules(settings))
        print(st.message)
        print(f"OpenAI base URL: {settings.base_url}  model: {settings.alias}  log: {settings.log_file}")
        return EXIT_OK
    except LocalLLMError as exc:
        print(f"local-llm: error: {exc}", file=sys.stderr)
        return EXIT_ERROR
