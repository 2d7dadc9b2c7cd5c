"""A document's text for ingestion, and its chunks.

HTML is flattened to its visible text (script and style dropped); JSON to `path: value`
lines, so a key's name stays next to its value in the chunk that holds it. Chunks are windows
of whitespace-separated words with an overlap, so a passage cut at a boundary is whole in
one of the two chunks beside it.
"""

from __future__ import annotations

import json
from html.parser import HTMLParser
from typing import Any


class _TextOfHtml(HTMLParser):
    SKIP = {"script", "style", "head", "noscript"}
    BLOCK = {"p", "div", "br", "li", "tr", "h1", "h2", "h3", "h4", "h5", "h6", "section", "article", "pre"}

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self._skipping = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in self.SKIP:
            self._skipping += 1
        elif tag in self.BLOCK:
            self.parts.append("\n")

    def handle_endtag(self, tag: str) -> None:
        if tag in self.SKIP and self._skipping:
            self._skipping -= 1

    def handle_data(self, data: str) -> None:
        if not self._skipping:
            self.parts.append(data)


def html_text(html: str) -> str:
    parser = _TextOfHtml()
    parser.feed(html)
    parser.close()
    lines = (" ".join(line.split()) for line in "".join(parser.parts).splitlines())
    return "\n".join(line for line in lines if line)


def json_text(value: Any, path: str = "") -> str:
    lines: list[str] = []

    def walk(node: Any, at: str) -> None:
        if isinstance(node, dict):
            for key, child in node.items():
                walk(child, f"{at}.{key}" if at else str(key))
        elif isinstance(node, list):
            for i, child in enumerate(node):
                walk(child, f"{at}[{i}]")
        elif node is not None:
            lines.append(f"{at}: {node}" if at else str(node))

    walk(value, path)
    return "\n".join(lines)


def document_text(content_type: str, data: bytes) -> str:
    text = data.decode("utf-8-sig")
    if content_type == "text/html":
        return html_text(text)
    if content_type == "application/json":
        return json_text(json.loads(text))
    return text


def chunk_words(text: str, size: int, overlap: int) -> list[str]:
    """Windows of `size` words, each starting `size - overlap` words after the last."""
    if overlap >= size:
        raise ValueError("overlap must be below size")
    words = text.split()
    if not words:
        return []
    step = size - overlap
    chunks = []
    for start in range(0, len(words), step):
        chunks.append(" ".join(words[start : start + size]))
        if start + size >= len(words):
            break
    return chunks
