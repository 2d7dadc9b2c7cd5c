"""`svc-sr benchmark serve`: a small read-only HTTP API over the benchmark store, for a
dashboard or a script on the same machine (default 127.0.0.1:8090).

    GET /healthz                           {"status": "ok", "store": ...}
    GET /api/v1/runs?limit=N               stored runs, newest first (limit 1 to 200, default 50)
    GET /api/v1/runs/{run}                 a run's record (an id or a unique prefix)
    GET /api/v1/runs/{run}/results?offset=&limit=   its per-question results (limit 1 to 1000)
    GET /api/v1/experiments[/{name}]       experiments (one: with its runs' records)
    GET /api/v1/targets                    registered targets
    GET /api/v1/datasets                   prepared datasets
    GET /api/v1/active                     runs in progress, cancelled or interrupted

Failures answer the error body of the service (app/common/errors.py): 400 for a bad query
value, 404 for an unknown path, run or name, 405 for a method other than GET/HEAD. Standard
library only (http.server, one thread per request): the store is files, read per request.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from pydantic import BaseModel

from app.benchmark.active import ActiveRuns
from app.benchmark.records import QuestionResult, RunRecord
from app.benchmark.registry import Experiment, Registry, Target
from app.benchmark.store import DatasetIndex, RunStore, StoreError
from app.common.errors import SvcError, bad_request

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8090


class RunList(BaseModel):
    runs: list[RunRecord]
    total: int


class ResultPage(BaseModel):
    run_id: str
    results: list[QuestionResult]
    offset: int
    total: int


class ExperimentDetail(Experiment):
    records: list[RunRecord]
    missing: list[str]


class ExperimentList(BaseModel):
    experiments: list[Experiment]


class TargetList(BaseModel):
    targets: list[Target]


class DatasetList(BaseModel):
    datasets: list[DatasetIndex]


def not_found(message: str) -> SvcError:
    return SvcError(404, message, code="not_found")


def _int(query: dict[str, list[str]], name: str, default: int, low: int, high: int) -> int:
    raw = query.get(name, [str(default)])[-1]
    try:
        value = int(raw)
    except ValueError:
        raise bad_request(f"{name} must be an integer, got {raw!r}", param=name) from None
    if not low <= value <= high:
        raise bad_request(f"{name} must be {low} to {high}, got {value}", param=name)
    return value


class StoreApi:
    """The answers, apart from HTTP: path and query in, a pydantic model (or dict) out."""

    def __init__(self, store: RunStore) -> None:
        self.store = store
        self.registry = Registry(store)

    def answer(self, path: str, query: dict[str, list[str]]) -> BaseModel | dict[str, Any]:
        parts = [unquote(p) for p in path.strip("/").split("/") if p]
        if parts == ["healthz"]:
            return {"status": "ok", "store": str(self.store.root)}
        if parts[:2] != ["api", "v1"] or len(parts) < 3:
            raise not_found(f"no route {path}")
        resource, rest = parts[2], parts[3:]
        try:
            if resource == "runs":
                return self._runs(rest, query)
            if resource == "experiments" and len(rest) <= 1:
                return self._experiments(rest)
            if resource == "targets" and not rest:
                return TargetList(targets=self.registry.targets())
            if resource == "datasets" and not rest:
                return DatasetList(datasets=self.store.list_datasets())
            if resource == "active" and not rest:
                return {"runs": [s.model_dump() for s in ActiveRuns(self.store).states()]}
        except StoreError as exc:
            raise not_found(str(exc)) from None
        raise not_found(f"no route {path}")

    def _runs(self, rest: list[str], query: dict[str, list[str]]) -> BaseModel:
        if not rest:
            limit = _int(query, "limit", 50, 1, 200)
            records = self.store.list_runs()
            return RunList(runs=records[:limit], total=len(records))
        if len(rest) == 1:
            return self.store.load_record(rest[0])
        if len(rest) == 2 and rest[1] == "results":
            offset = _int(query, "offset", 0, 0, 10**9)
            limit = _int(query, "limit", 100, 1, 1000)
            record, results = self.store.load(rest[0])
            return ResultPage(
                run_id=record.run_id,
                results=results[offset : offset + limit],
                offset=offset,
                total=len(results),
            )
        raise not_found("no such run resource")

    def _experiments(self, rest: list[str]) -> BaseModel:
        if not rest:
            return ExperimentList(experiments=self.registry.experiments())
        experiment = self.registry.experiment(rest[0])
        records, missing = [], []
        for run_id in experiment.runs:
            try:
                records.append(self.store.load_record(run_id))
            except StoreError:
                missing.append(run_id)
        return ExperimentDetail(**experiment.model_dump(), records=records, missing=missing)


def _handler(api: StoreApi) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        server_version = "svc-sr-benchmark/0.1"

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the stdlib's name
            return  # quiet: a dashboard polls

        def _send(self, status: int, body: dict[str, Any], head: bool = False) -> None:
            data = json.dumps(body, ensure_ascii=False).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            if status == 405:
                self.send_header("allow", "GET, HEAD")
            self.end_headers()
            if not head:
                self.wfile.write(data)

        def _get(self, head: bool) -> None:
            url = urlsplit(self.path)
            try:
                answer = api.answer(url.path, parse_qs(url.query))
            except SvcError as exc:
                self._send(exc.status, exc.body(), head)
                return
            body = answer.model_dump(mode="json") if isinstance(answer, BaseModel) else answer
            self._send(200, body, head)

        def do_GET(self) -> None:  # noqa: N802 - http.server's names
            self._get(head=False)

        def do_HEAD(self) -> None:  # noqa: N802
            self._get(head=True)

        def _refuse(self) -> None:
            error = SvcError(
                405,
                f"{self.command} is not allowed: the benchmark API is read-only",
                code="method_not_allowed",
            )
            self._send(405, error.body())

        do_POST = do_PUT = do_PATCH = do_DELETE = _refuse  # noqa: N815

    return Handler


def make_server(store: RunStore, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT) -> ThreadingHTTPServer:
    """Bound and listening (port 0: a free one, see server_address); serve_forever() serves."""
    server = ThreadingHTTPServer((host, port), _handler(StoreApi(store)))
    server.daemon_threads = True
    return server


def serve_in_thread(server: ThreadingHTTPServer) -> threading.Thread:
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    return thread
