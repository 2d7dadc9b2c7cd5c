"""Uploaded images for the Responses API: `{type: input_image, file_id}` -> a chat `image_url`.

docs/storage.md: images uploaded with purpose=vision (/api/v1/storage/files) are referenced
from a Responses `input_image` part by `file_id`. A chat backend cannot read our files store,
so the front door inlines the image as OpenAI's chat vision part,
`{"type": "image_url", "image_url": {"url": "data:<mime>;base64,...", "detail"?}}`.

The front door is given a `ResolveImageFile` (file id -> the file's bytes and media type, None
for an unknown id), an async callable so it can be a local `FileStore` (read off the event
loop), or a client of a storage service elsewhere. `StoredImages` builds one over anything with
FileStore's `get(file_id)` (the record: purpose, content_type, bytes) and `content(file_id)`,
sync or async. `resolve_input_images` resolves every file id of a request once, before the
(sync) translation, and answers the failures with the data plane's error body:

| case | status | code |
|---|---|---|
| unknown file id | 404 `invalid_request_error` | `file_not_found` (param: the part's path) |
| not a purpose=vision image, or over the store's `max_file_bytes` | 400 `invalid_request_error` | `invalid_image_file` |
| the files store cannot be read (down, or none in this process) | 503 `service_unavailable_error` | `file_store_unavailable`, Retry-After: 1 |

An unknown id is 404, as an unknown `previous_response_id` is in the same API (and as the files
routes answer): the request is well-formed, what it names is not there.

A front door without a resolver (the ext_proc bridge) leaves `file_id` to the translation,
which answers 400 (`input_image needs image_url (file_id needs the files store)`).
"""

from __future__ import annotations

import asyncio
import base64
import inspect
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol, cast

from app.common.errors import SvcError

log = logging.getLogger("svc_sr.image_files")


@dataclass(frozen=True)
class ImageFile:
    """An uploaded image as a chat backend gets it."""

    media_type: str  # image/png, image/jpeg, image/gif, image/webp (sniffed at upload)
    data: bytes

    def data_url(self) -> str:
        return f"data:{self.media_type};base64,{base64.b64encode(self.data).decode('ascii')}"


# file id -> the image (None: no such file); raises ImageFileRejected / ImageStoreDown.
ResolveImageFile = Callable[[str], Awaitable[ImageFile | None]]


class ImageFileRejected(ValueError):
    """The file exists but an input_image cannot take it (purpose, kind, size)."""


class ImageStoreDown(RuntimeError):
    """The files store cannot be read (down, or none reachable from this process)."""


class FileRecord(Protocol):
    """What the resolver reads of a file's record (FileStore's FileObject has these)."""

    @property
    def purpose(self) -> str: ...

    @property
    def content_type(self) -> str: ...

    @property
    def bytes(self) -> int: ...


class FileSource(Protocol):
    """FileStore (sync: run off the event loop), or a client with the same methods as coroutines.
    Either may raise OSError (FileServiceDown is one) when the store is down."""

    def get(self, file_id: str) -> Any: ...  # FileRecord | None, or an awaitable of it

    def content(self, file_id: str) -> Any: ...  # bytes | None, or an awaitable of it


async def _call(method: Callable[[str], Any], file_id: str) -> Any:
    if inspect.iscoroutinefunction(method):
        return await method(file_id)
    result = await asyncio.to_thread(method, file_id)  # file I/O never blocks the loop
    return await result if inspect.isawaitable(result) else result


class StoredImages:
    """A `ResolveImageFile` over a files store. `max_bytes`: the largest image inlined
    (default: the store's own `max_file_bytes`, the upload limit)."""

    def __init__(self, files: FileSource, max_bytes: int | None = None) -> None:
        self.files = files
        limit = max_bytes if max_bytes is not None else getattr(files, "max_file_bytes", None)
        self.max_bytes: int | None = int(limit) if limit is not None else None

    async def __call__(self, file_id: str) -> ImageFile | None:
        try:
            record = cast("FileRecord | None", await _call(self.files.get, file_id))
            if record is None:
                return None
            self._check(file_id, record.purpose, record.content_type, record.bytes)
            data = cast("bytes | None", await _call(self.files.content, file_id))
        except (ImageFileRejected, ImageStoreDown):
            raise
        except Exception as exc:  # FileServiceDown (an OSError), a remote client's errors: never a 500
            log.warning("files store read for %s failed: %r", file_id, exc)
            raise ImageStoreDown(str(exc) or type(exc).__name__) from exc
        if data is None:
            return None  # deleted between the two reads
        self._check(file_id, record.purpose, record.content_type, len(data))
        return ImageFile(record.content_type, data)

    def _check(self, file_id: str, purpose: str, content_type: str, size: int) -> None:
        if purpose != "vision" or not content_type.startswith("image/"):
            raise ImageFileRejected(
                f"file {file_id!r} has purpose {purpose!r} ({content_type}); input_image takes "
                "images uploaded with purpose=vision"
            )
        if self.max_bytes is not None and size > self.max_bytes:
            raise ImageFileRejected(
                f"file {file_id!r} is {size} bytes, over the limit of {self.max_bytes} for an input_image"
            )


# -- the request's file ids --------------------------------------------------------------
def image_file_ids(items: str | list[dict[str, Any]]) -> dict[str, str]:
    """file id -> where it is first referenced (`input[i].content[j]`), for the input_image
    parts of a Responses input that name a file_id and no image_url."""
    found: dict[str, str] = {}
    if isinstance(items, str):
        return found
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            continue
        parts = item.get("content")  # (a tool result's images are dropped: chat tool results are text)
        if item.get("type") not in (None, "message") or not isinstance(parts, list):
            continue
        for j, part in enumerate(parts):
            if not isinstance(part, dict) or part.get("type") != "input_image" or part.get("image_url"):
                continue
            file_id = part.get("file_id")
            if isinstance(file_id, str) and file_id:
                found.setdefault(file_id, f"input[{i}].content[{j}].file_id")
    return found


def file_store_unavailable(reason: str) -> SvcError:
    return SvcError(
        503,
        f"the files store is unavailable ({reason}); retry later",
        "service_unavailable_error",
        "file_store_unavailable",
        headers={"Retry-After": "1"},
    )


async def resolve_input_images(
    items: str | list[dict[str, Any]], resolve: ResolveImageFile
) -> dict[str, ImageFile]:
    """Every input_image file id of a Responses input resolved, one at a time (each image is
    held in memory until the request is sent); SvcError 400/503 as in the module's table."""
    images: dict[str, ImageFile] = {}
    for file_id, where in image_file_ids(items).items():
        try:
            image = await resolve(file_id)
        except ImageFileRejected as exc:
            raise SvcError(
                400, str(exc), "invalid_request_error", "invalid_image_file", param=where
            ) from None
        except ImageStoreDown as exc:
            raise file_store_unavailable(str(exc)) from None
        if image is None:
            raise SvcError(
                404,
                f"No file found with id {file_id!r} (input_image takes a file uploaded to "
                "/api/v1/storage/files with purpose=vision)",
                "invalid_request_error",
                "file_not_found",
                param=where,
            )
        images[file_id] = image
    return images


__all__ = [
    "FileSource",
    "ImageFile",
    "ImageFileRejected",
    "ImageStoreDown",
    "ResolveImageFile",
    "StoredImages",
    "file_store_unavailable",
    "image_file_ids",
    "resolve_input_images",
]
