"""Uploaded files (docs/storage.md, /api/v1/storage/files), kept under one directory.

Layout: `<dir>/<id>.bin` (the bytes) and `<id>.json` (its FileObject). Both are written to a
temporary file in the same directory, fsynced and renamed, content first: a file exists once
its record does, so a failed or interrupted upload leaves nothing a listing shows (leftover
temporaries are removed when the store opens).

The kind is decided by the content, not the name: images by their magic bytes, documents by
decoding as UTF-8 (no NUL; .json must parse). The name's extension must agree with it.
"""

from __future__ import annotations

import json
import os
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

DOCUMENT_TYPES = {
    ".txt": "text/plain",
    ".md": "text/markdown",
    ".json": "application/json",
    ".csv": "text/csv",
    ".html": "text/html",
}
IMAGE_TYPES = {
    ".png": "image/png",
    ".jpg": "image/jpeg",
    ".jpeg": "image/jpeg",
    ".gif": "image/gif",
    ".webp": "image/webp",
}
Purpose = Literal["assistants", "vision"]


class FileObject(BaseModel):
    """OpenAI's file object, plus the content type svc-sr sniffed."""

    id: str
    object: Literal["file"] = "file"
    bytes: int
    created_at: int
    filename: str
    purpose: Purpose
    content_type: str = Field(description="decided from the content (magic bytes / UTF-8), not the name")
    status: Literal["processed"] = "processed"


class FileList(BaseModel):
    object: Literal["list"] = "list"
    data: list[FileObject]


class FileDeleted(BaseModel):
    id: str
    object: Literal["file"] = "file"
    deleted: bool = True


class FileRejected(ValueError):
    """The upload is not acceptable (kind, size, count); `details` go in the 400 body."""

    def __init__(self, message: str, **details: object) -> None:
        super().__init__(message)
        self.details = details


class FileServiceDown(OSError):
    """The storage directory cannot be read or written."""


def sniff_image(data: bytes) -> str | None:
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if data.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if data[:6] in (b"GIF87a", b"GIF89a"):
        return "image/gif"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return None


def content_type_of(filename: str, data: bytes, purpose: Purpose) -> str:
    """The content type of an acceptable upload; FileRejected names why it is not."""
    ext = Path(filename).suffix.lower()
    if ext not in DOCUMENT_TYPES and ext not in IMAGE_TYPES:
        allowed = sorted(DOCUMENT_TYPES) + sorted(IMAGE_TYPES)
        raise FileRejected(f"unsupported file extension {ext or '(none)'!r}", allowed=allowed)
    if not data:
        raise FileRejected("the file is empty")
    image = sniff_image(data)
    if ext in IMAGE_TYPES:
        if purpose != "vision":
            raise FileRejected("images are uploaded with purpose=vision", purpose=purpose)
        if image != IMAGE_TYPES[ext]:
            raise FileRejected(f"content is not a {IMAGE_TYPES[ext]} image", detected=image or "unknown")
        return image
    if purpose == "vision":
        raise FileRejected("purpose=vision takes images (.png .jpg .jpeg .gif .webp)")
    if image is not None:
        raise FileRejected(f"content is a {image} image, not a {ext} document", detected=image)
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise FileRejected("document content is not UTF-8 text", detected="binary") from None
    if "\x00" in text:
        raise FileRejected("document content is not text (NUL bytes)", detected="binary")
    if ext == ".json":
        try:
            json.loads(text)
        except ValueError:
            raise FileRejected("a .json file must hold valid JSON") from None
    return DOCUMENT_TYPES[ext]


def atomic_write(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".upload-", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


class FileStore:
    """The uploaded files under `directory` (created when missing)."""

    def __init__(self, directory: Path, max_file_bytes: int, max_files: int) -> None:
        self.directory = directory
        self.max_file_bytes = max_file_bytes
        self.max_files = max_files
        self._lock = threading.Lock()  # count-then-write must not race another upload
        try:
            directory.mkdir(parents=True, exist_ok=True)
            for leftover in directory.glob(".upload-*.tmp"):
                leftover.unlink(missing_ok=True)
        except OSError as exc:
            raise FileServiceDown(f"file storage directory {directory} unusable: {exc}") from exc

    def create(self, filename: str, data: bytes, purpose: Purpose) -> FileObject:
        if len(data) > self.max_file_bytes:
            raise FileRejected(
                f"file is {len(data)} bytes, over the limit of {self.max_file_bytes}",
                limit_bytes=self.max_file_bytes,
                size_bytes=len(data),
            )
        content_type = content_type_of(filename, data, purpose)
        name = Path(filename.replace("\\", "/")).name  # never a path the client chose
        record = FileObject(
            id=f"file-{uuid.uuid4().hex}",
            bytes=len(data),
            created_at=int(time.time()),
            filename=name,
            purpose=purpose,
            content_type=content_type,
        )
        with self._lock:
            if len(self._records()) >= self.max_files:
                raise FileRejected(f"the file limit of {self.max_files} is reached", max_files=self.max_files)
            try:
                atomic_write(self._blob(record.id), data)
                atomic_write(self._meta(record.id), record.model_dump_json().encode())
            except OSError as exc:
                self._blob(record.id).unlink(missing_ok=True)
                raise FileServiceDown(f"file storage unavailable: {exc}") from exc
        return record

    def listing(self, purpose: str | None = None) -> list[FileObject]:
        records = [r for r in self._records() if purpose is None or r.purpose == purpose]
        return sorted(records, key=lambda r: (r.created_at, r.id))

    def get(self, file_id: str) -> FileObject | None:
        if not _valid_id(file_id):
            return None
        try:
            return FileObject.model_validate_json(self._meta(file_id).read_bytes())
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise FileServiceDown(f"file storage unavailable: {exc}") from exc

    def content(self, file_id: str) -> bytes | None:
        if self.get(file_id) is None:
            return None
        try:
            return self._blob(file_id).read_bytes()
        except OSError as exc:
            raise FileServiceDown(f"file storage unavailable: {exc}") from exc

    def delete(self, file_id: str) -> bool:
        if self.get(file_id) is None:
            return False
        try:  # the record first: a crash between leaves bytes nobody lists, not a broken record
            self._meta(file_id).unlink(missing_ok=True)
            self._blob(file_id).unlink(missing_ok=True)
        except OSError as exc:
            raise FileServiceDown(f"file storage unavailable: {exc}") from exc
        return True

    def _records(self) -> list[FileObject]:
        try:
            paths = list(self.directory.glob("file-*.json"))
        except OSError as exc:
            raise FileServiceDown(f"file storage unavailable: {exc}") from exc
        out = []
        for path in paths:
            try:
                out.append(FileObject.model_validate_json(path.read_bytes()))
            except (OSError, ValueError):
                continue  # deleted meanwhile, or not ours
        return out

    def _blob(self, file_id: str) -> Path:
        return self.directory / f"{file_id}.bin"

    def _meta(self, file_id: str) -> Path:
        return self.directory / f"{file_id}.json"


def _valid_id(file_id: str) -> bool:
    return file_id.startswith("file-") and file_id[5:].isalnum() and len(file_id) <= 64
