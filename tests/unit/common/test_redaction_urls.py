"""The password inside a URL (`redis://user:pass@host`) is a secret wherever the URL stands."""

from __future__ import annotations

from app.common.redaction import REDACTED, redact, restore_redacted, scrub, secret_values

DOC = {
    "global": {"stores": {"response_cache": {"redis": {"url": "redis://default:s3cret-pw@cache:6379/0"}}}},
    "providers": {"models": [{"name": "m", "backend_refs": [{"base_url": "http://llm:8000/v1"}]}]},
}


def test_a_url_password_is_redacted_and_nothing_else() -> None:
    view = redact(DOC)
    assert (
        view["global"]["stores"]["response_cache"]["redis"]["url"]
        == f"redis://default:{REDACTED}@cache:6379/0"
    )
    assert view["providers"]["models"][0]["backend_refs"][0]["base_url"] == "http://llm:8000/v1"


def test_a_redacted_url_sent_back_keeps_its_password() -> None:
    assert restore_redacted(redact(DOC), DOC) == DOC
    changed = redact(DOC)
    changed["global"]["stores"]["response_cache"]["redis"]["url"] = f"redis://default:{REDACTED}@other:6379/0"
    restored = restore_redacted(changed, DOC)
    assert (
        restored["global"]["stores"]["response_cache"]["redis"]["url"]
        == changed["global"]["stores"]["response_cache"]["redis"]["url"]
    )  # another host: the placeholder is not silently resolved


def test_error_messages_lose_the_password() -> None:
    text = "redis://default:s3cret-pw@cache:6379/0 refused the connection"
    assert "s3cret-pw" not in scrub(text, secret_values(DOC))
