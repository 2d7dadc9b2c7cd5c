"""/api/v1/storage/files: upload (content sniffing, limits, no half-written files), list,
inspect, download, delete, and 503 when the file service is unavailable."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from app.api.routes.files import parse_multipart
from app.config.storage import VectorStoreConfig
from app.storage import StorageService, open_storage
from app.storage.files import FileStore
from tests.fakes.embedding import hashed_embed
from tests.unit.management.test_management_support import Harness

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 32
JPEG = b"\xff\xd8\xff\xe0" + b"\x00" * 32
FILES = "/api/v1/storage/files"


def storage(tmp_path: Path, **settings: object) -> StorageService:
    service = open_storage(
        VectorStoreConfig(directory=str(tmp_path), **settings), tmp_path, embed=hashed_embed
    )
    assert service is not None
    return service


def upload(name: str, data: bytes, purpose: str | None = None) -> dict[str, object]:
    files = {"file": (name, data)}
    return {"files": files, "data": {"purpose": purpose} if purpose else {}}


async def test_documents_and_images_round_trip(tmp_path: Path) -> None:
    harness = Harness(storage=storage(tmp_path))
    async with harness.client() as client:
        doc = await client.post(FILES, **upload("notes.md", b"# Title\nsome text"))  # type: ignore[arg-type]  # httpx kwargs
        assert doc.status_code == 200, doc.text
        assert doc.json()["content_type"] == "text/markdown" and doc.json()["purpose"] == "assistants"
        image = await client.post(FILES, **upload("cat.png", PNG, "vision"))  # type: ignore[arg-type]  # httpx kwargs
        assert image.status_code == 200 and image.json()["content_type"] == "image/png"
        listed = (await client.get(FILES)).json()["data"]
        assert {f["id"] for f in listed} == {doc.json()["id"], image.json()["id"]}
        assert [f["id"] for f in (await client.get(FILES, params={"purpose": "vision"})).json()["data"]] == [
            image.json()["id"]
        ]
        inspected = await client.get(f"{FILES}/{doc.json()['id']}")
        assert inspected.json() == doc.json()
        content = await client.get(f"{FILES}/{image.json()['id']}/content")
        assert content.content == PNG and content.headers["content-type"] == "image/png"
        deleted = await client.delete(f"{FILES}/{doc.json()['id']}")
        assert deleted.json() == {"id": doc.json()["id"], "object": "file", "deleted": True}
        assert (await client.get(f"{FILES}/{doc.json()['id']}")).status_code == 404
        assert (await client.get(f"{FILES}/{doc.json()['id']}/content")).status_code == 404
        assert (await client.delete(f"{FILES}/{doc.json()['id']}")).json()["error"]["code"] == "NOT_FOUND"


@pytest.mark.parametrize(
    ("name", "data", "purpose", "reason"),
    [
        ("photo.png", JPEG, "vision", "not a image/png image"),  # the name lies about the kind
        ("notes.txt", PNG, None, "is a image/png image"),  # an image named as text
        ("notes.txt", b"\xff\xfe\x00bin\x00", None, "not UTF-8"),
        ("data.json", b"{not json", None, "valid JSON"),
        ("cat.png", PNG, None, "purpose=vision"),  # images need purpose=vision
        ("notes.txt", b"text", "vision", "takes images"),
        ("run.exe", b"MZ", None, "unsupported file extension"),
        ("empty.txt", b"", None, "empty"),
    ],
)
@pytest.mark.slow
async def test_content_is_checked_not_the_name(
    tmp_path: Path, name: str, data: bytes, purpose: str | None, reason: str
) -> None:
    harness = Harness(storage=storage(tmp_path))
    async with harness.client() as client:
        response = await client.post(FILES, **upload(name, data, purpose))  # type: ignore[arg-type]  # httpx kwargs
        assert response.status_code == 400
        assert (
            response.json()["error"]["code"] == "INVALID_INPUT"
            and reason in response.json()["error"]["message"]
        )
        assert (await client.get(FILES)).json()["data"] == []


@pytest.mark.slow
async def test_size_and_count_limits_answer_the_spec_body(tmp_path: Path) -> None:
    harness = Harness(storage=storage(tmp_path, max_file_bytes=64, max_files=2))
    async with harness.client() as client:
        big = await client.post(FILES, **upload("big.txt", b"x" * 65))  # type: ignore[arg-type]  # httpx kwargs
        assert big.status_code == 400
        error = big.json()["error"]
        assert error["code"] == "INVALID_INPUT" and error["details"] == {"limit_bytes": 64, "size_bytes": 65}
        assert set(error) >= {"code", "message", "timestamp"}
        for i in range(2):
            ok = await client.post(FILES, **upload(f"f{i}.txt", b"x" * 64))  # type: ignore[arg-type]  # httpx kwargs
            assert ok.status_code == 200
        third = await client.post(FILES, **upload("f3.txt", b"hello"))  # type: ignore[arg-type]  # httpx kwargs
        assert third.status_code == 400 and third.json()["error"]["details"] == {"max_files": 2}
        assert len((await client.get(FILES)).json()["data"]) == 2


@pytest.mark.slow
async def test_a_cut_short_upload_stores_nothing(tmp_path: Path) -> None:
    harness = Harness(storage=storage(tmp_path))
    body = b'--XyZ\r\nContent-Disposition: form-data; name="file"; filename="a.txt"\r\n\r\nhalf of the'
    async with harness.client() as client:
        response = await client.post(
            FILES, content=body, headers={"content-type": "multipart/form-data; boundary=XyZ"}
        )
        assert response.status_code == 400 and "incomplete" in response.json()["error"]["message"]
        assert (await client.get(FILES)).json()["data"] == []
    assert [p.name for p in (tmp_path / "files").iterdir()] == []


def test_a_failed_write_leaves_no_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = FileStore(tmp_path, 1024, 10)
    real_fsync = os.fsync
    calls = []

    def failing_fsync(fd: int) -> None:
        calls.append(fd)
        if len(calls) == 2:  # the bytes went down; the record's write fails
            raise OSError(28, "No space left on device")
        real_fsync(fd)

    monkeypatch.setattr("app.storage.files.os.fsync", failing_fsync)
    with pytest.raises(OSError, match="unavailable"):
        store.create("a.txt", b"hello", "assistants")
    assert list(tmp_path.iterdir()) == [] and store.listing() == []
    # leftovers of a crash mid-write are swept when the store opens
    (tmp_path / ".upload-1.tmp").write_bytes(b"partial")
    assert FileStore(tmp_path, 1024, 10).listing() == [] and not (tmp_path / ".upload-1.tmp").exists()


@pytest.mark.slow
async def test_503_when_the_file_service_is_unavailable(tmp_path: Path) -> None:
    service = storage(tmp_path)
    async with Harness().client() as client:  # no storage in this process
        response = await client.get(FILES)
        assert response.status_code == 503 and response.json()["error"]["code"] == "SERVICE_UNAVAILABLE"
        assert "timestamp" in response.json()["error"]
    (tmp_path / "files").rename(tmp_path / "gone")
    (tmp_path / "files").write_text("a file where the directory was")  # the directory is unusable
    async with Harness(storage=service).client() as client:
        response = await client.post(FILES, **upload("a.txt", b"hello"))  # type: ignore[arg-type]  # httpx kwargs
        assert response.status_code == 503 and response.headers["retry-after"] == "5"


def test_multipart_parsing_keeps_binary_bytes() -> None:
    payload = b"\r\n--not-the-boundary\r\n\x00\xff"
    body = (
        b'--b1\r\nContent-Disposition: form-data; name="purpose"\r\n\r\nvision\r\n'
        b'--b1\r\nContent-Disposition: form-data; name="file"; filename="x.png"\r\nContent-Type: image/png\r\n\r\n'
        + payload
        + b"\r\n--b1--\r\n"
    )
    fields = parse_multipart("multipart/form-data; boundary=b1", body)
    assert fields == {"purpose": (None, b"vision"), "file": ("x.png", payload)}


@pytest.mark.slow
async def test_file_names_never_become_paths(tmp_path: Path) -> None:
    async with Harness(storage=storage(tmp_path)).client() as client:
        response = await client.post(FILES, **upload("../../etc/evil.txt", b"hi"))  # type: ignore[arg-type]  # httpx kwargs
        assert response.status_code == 200 and response.json()["filename"] == "evil.txt"
    assert not (tmp_path.parent / "etc").exists()
    assert json.loads(next((tmp_path / "files").glob("*.json")).read_text())["filename"] == "evil.txt"
