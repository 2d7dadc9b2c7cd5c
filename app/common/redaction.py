"""Secrets out of configuration views, replay records and error messages.

Without `secret_view` a principal sees `REDACTED` in place of: values of keys that name a
credential (api_key, token, password, secret, authorization, credential, private_key,
access_key), every value of a header map (extra_headers, headers), and the password inside
any URL (`redis://user:pass@host`). Keys ending in `_env` name an environment variable, not a
secret, and stay visible.

A document read redacted and sent back unchanged must not overwrite the real secrets
with the placeholder: `restore_redacted` puts the current values back where the
submitted document still holds `REDACTED`.
"""

from __future__ import annotations

import re
from typing import Any

REDACTED = "***REDACTED***"
_SECRET_KEY = re.compile(
    r"(api[_-]?key|token|password|passwd|secret|authorization|credential|private[_-]?key|"
    r"access[_-]?key|cookie)",
    re.IGNORECASE,
)
_HEADER_MAPS = frozenset({"extra_headers", "headers", "upstream_headers"})
_MIN_SCRUB_LEN = 4  # shorter values would blank out ordinary words in messages
# scheme://user:password@host: the password is a secret wherever the URL stands.
_URL_PASSWORD = re.compile(
    r"^(?P<head>[a-z][a-z0-9+.-]*://[^/:@\s]*:)(?P<password>[^@/\s]+)(?P<tail>@.*)$", re.I
)


def redact_url(text: str) -> str:
    """`text` with the password of a URL's userinfo replaced by REDACTED (other text as it is)."""
    match = _URL_PASSWORD.match(text)
    if match is None:
        return text
    return f"{match['head']}{REDACTED}{match['tail']}"


def is_secret_key(key: str) -> bool:
    lowered = key.lower()
    if lowered.endswith("_env") or lowered.endswith("_path") or lowered.endswith("_file"):
        return False
    return bool(_SECRET_KEY.search(key))


def redact(value: Any) -> Any:
    """A copy of `value` with secret values replaced by REDACTED."""
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            key_text = str(key)
            if key_text.lower() in _HEADER_MAPS and isinstance(item, dict):
                out[key] = {name: REDACTED for name in item}
            elif is_secret_key(key_text) and item is not None and not isinstance(item, dict | list | bool):
                out[key] = REDACTED
            else:
                out[key] = redact(item)
        return out
    if isinstance(value, list):
        return [redact(item) for item in value]
    if isinstance(value, str):
        return redact_url(value)
    return value


def secret_values(value: Any) -> set[str]:
    """Every string `redact` would hide, to scrub from free text (error messages)."""
    found: set[str] = set()

    def walk(node: Any, secret: bool) -> None:
        if isinstance(node, dict):
            for key, item in node.items():
                key_text = str(key)
                walk(item, secret or is_secret_key(key_text) or key_text.lower() in _HEADER_MAPS)
        elif isinstance(node, list):
            for item in node:
                walk(item, secret)
        elif secret and isinstance(node, str | int | float) and not isinstance(node, bool):
            text = str(node)
            if len(text) >= _MIN_SCRUB_LEN:
                found.add(text)
        elif (
            isinstance(node, str)
            and (match := _URL_PASSWORD.match(node)) is not None
            and len(match["password"]) >= _MIN_SCRUB_LEN
        ):
            found.add(match["password"])

    walk(value, False)
    return found


def scrub(text: str, secrets: set[str]) -> str:
    for secret in sorted(secrets, key=len, reverse=True):
        text = text.replace(secret, REDACTED)
    return text


def restore_redacted(submitted: Any, current: Any) -> Any:
    """`submitted` with each REDACTED placeholder replaced by the value at the same place in `current`."""
    if isinstance(submitted, dict):
        base = current if isinstance(current, dict) else {}
        return {key: restore_redacted(item, base.get(key)) for key, item in submitted.items()}
    if isinstance(submitted, list):
        base_list = current if isinstance(current, list) else []
        return [
            restore_redacted(item, base_list[i] if i < len(base_list) else None)
            for i, item in enumerate(submitted)
        ]
    if submitted == REDACTED and current is not None:
        return current
    if (
        isinstance(submitted, str)
        and isinstance(current, str)
        and REDACTED in submitted
        and redact_url(current) == submitted
    ):
        return current  # a URL read redacted and sent back unchanged keeps its password
    return submitted
