"""`svc-sr storage`: files and vector stores through the management API (docs/storage.md).

    svc-sr storage upload FILE [--purpose vision]
    svc-sr storage vector-stores list | create [--name N] [--file ID ...] | show ID | delete ID
    svc-sr storage vector-stores attach ID FILE_ID [--attribute k=v ...]
    svc-sr storage vector-stores search ID QUERY [-n 5] [--ranker hybrid|vector|bm25|hybrid_rerank]
    svc-sr storage rotate ID
    svc-sr storage context-recovery invalidate --scope user:<id>|session:<id> [--dry-run] [--reason R]

`rotate` rebuilds a vector store's index: every file is re-ingested from its stored bytes with
the deployment's current chunking and encoder (after changing either). It returns at once;
`vector-stores show` reports the files' progress. `context-recovery invalidate` stops the router
recalling the scope's earlier memories and serving its earlier cached answers (docs/memories.md). Exit codes are the remote commands'
(app/cli/remote.py): 8 not found, 2 bad input, 5 service unavailable (503).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from app.cli.remote import EXIT_INVALID, Remote, echo_json, fail, remote_options

STORES = "/api/v1/storage/vector-stores"


@click.group()
def storage() -> None:
    """Uploaded files and vector stores (management API /api/v1/storage)."""


@storage.command("upload")
@click.argument("path", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option(
    "--purpose", type=click.Choice(["assistants", "vision"]), default="assistants", show_default=True
)
@remote_options
def upload(path: Path, purpose: str, remote: Remote) -> None:
    """Upload a document (.txt .md .json .csv .html) or, with --purpose vision, an image."""
    files = {"file": (path.name, path.read_bytes())}
    echo_json(remote.call("POST", "/api/v1/storage/files", files=files, data={"purpose": purpose}))


@storage.command("rotate")
@click.argument("store_id")
@remote_options
def rotate(store_id: str, remote: Remote) -> None:
    """Rebuild STORE_ID's index: re-ingest every file with the current chunking and encoder."""
    echo_json(remote.call("POST", f"{STORES}/{store_id}/rotate"))


@storage.group("vector-stores")
def vector_stores() -> None:
    """Create, list, show, delete and search vector stores; attach files."""


@vector_stores.command("list")
@remote_options
def list_stores(remote: Remote) -> None:
    """Every vector store with its file counts."""
    for store in remote.call("GET", STORES)["data"]:
        counts = store["file_counts"]
        click.echo(
            f"{store['id']}  {store.get('name') or '-'}  {store['status']}  files {counts['completed']}/{counts['total']}"
        )


@vector_stores.command("create")
@click.option("--name", default=None)
@click.option("--file", "file_ids", multiple=True, help="A file id to attach (repeatable).")
@remote_options
def create(name: str | None, file_ids: tuple[str, ...], remote: Remote) -> None:
    """Create a vector store (its files ingest in the background)."""
    echo_json(remote.call("POST", STORES, json={"name": name, "file_ids": list(file_ids)}))


@vector_stores.command("show")
@click.argument("store_id")
@remote_options
def show(store_id: str, remote: Remote) -> None:
    """A vector store and the status of each of its files."""
    store = remote.call("GET", f"{STORES}/{store_id}")
    store["files"] = remote.call("GET", f"{STORES}/{store_id}/files")["data"]
    echo_json(store)


@vector_stores.command("delete")
@click.argument("store_id")
@remote_options
def delete(store_id: str, remote: Remote) -> None:
    """Delete a vector store and its chunks (the files stay)."""
    echo_json(remote.call("DELETE", f"{STORES}/{store_id}"))


@vector_stores.command("attach")
@click.argument("store_id")
@click.argument("file_id")
@click.option(
    "--attribute", "attributes", multiple=True, help="key=value attribute for filters (repeatable)."
)
@remote_options
def attach(store_id: str, file_id: str, attributes: tuple[str, ...], remote: Remote) -> None:
    """Attach an uploaded file; it is chunked and embedded in the background."""
    parsed: dict[str, Any] = {}
    for item in attributes:
        key, sep, value = item.partition("=")
        if not sep or not key:
            fail(f"--attribute {item!r}: expected key=value", EXIT_INVALID)
        parsed[key] = value
    echo_json(
        remote.call("POST", f"{STORES}/{store_id}/files", json={"file_id": file_id, "attributes": parsed})
    )


@vector_stores.command("search")
@click.argument("store_id")
@click.argument("query")
@click.option("-n", "--max-results", default=5, show_default=True, type=click.IntRange(1, 50))
@click.option(
    "--ranker",
    type=click.Choice(["hybrid", "vector", "bm25", "hybrid_rerank"]),
    default="hybrid",
    show_default=True,
)
@remote_options
def search(store_id: str, query: str, max_results: int, ranker: str, remote: Remote) -> None:
    """The chunks of STORE_ID that best answer QUERY."""
    body = {"query": query, "max_num_results": max_results, "ranking_options": {"ranker": ranker}}
    for hit in remote.call("POST", f"{STORES}/{store_id}/search", json=body)["data"]:
        text = " ".join(hit["content"][0]["text"].split())
        click.echo(f"{hit['score']:.4f}  {hit['filename']}  {text[:160]}")


@storage.group("context-recovery")
def context_recovery() -> None:
    """The router's recovery of a scope's earlier context (memories, cached answers)."""


@context_recovery.command("invalidate")
@click.option("--scope", required=True, help="user:<id> or session:<id>")
@click.option("--dry-run", is_flag=True, help="Report what would be excluded; write nothing.")
@click.option("--reason", default=None, help="Kept on the mark and in the audit log.")
@remote_options
def invalidate_recovery(scope: str, dry_run: bool, reason: str | None, remote: Remote) -> None:
    """Stop recalling SCOPE's earlier memories and serving its earlier cached answers."""
    body: dict[str, Any] = {"scope": scope, "dry_run": dry_run}
    if reason is not None:
        body["reason"] = reason
    echo_json(remote.call("POST", "/api/v1/storage/context-recovery/invalidate", json=body))
