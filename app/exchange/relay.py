"""One streamed answer on its way to the client.

Upstream SSE bytes -> the backend's wire translation (messages-style -> chat chunks) -> the
chat accumulator (usage, the whole answer for the cache) -> the client API's encoding
(chat as is, or Responses events). A translation that fails ends the client's stream with an
error chunk and [DONE] and drops the rest: the client never sees untranslated bytes and is
never left waiting. An upstream that breaks mid-body (killed, reset, silent) ends it the same
way (`broken`), so a client never takes a cut answer for a whole one.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from app.exchange.client_api import ClientStream
from app.pipeline.pii_mask import StreamRestorer
from app.upstream.sse import SSEParser, StreamAccumulator
from app.upstream.wire import StreamTranslator, stream_error_end

log = logging.getLogger("svc_sr.exchange")

TRANSLATION_FAILED = "the upstream stream could not be translated"


class StreamRelay:
    def __init__(
        self,
        translator: StreamTranslator | None,
        client: ClientStream,
        clock: Callable[[], float] = time.perf_counter,
        restorer: StreamRestorer | None = None,
    ) -> None:
        """`translator` None: the bytes are chat already (a chat backend's error stream, a local answer).
        `restorer`: a masked request's originals go back in on the way to the client only (the
        accumulator, what the router keeps, holds the masked answer)."""
        self._translator = translator
        self._restorer = restorer
        self._client = client
        self._clock = clock
        self._parser = SSEParser()
        self.accumulator = StreamAccumulator()
        self.failed = False
        self.first_chunk_at: float | None = None

    def feed(self, raw: bytes) -> bytes:
        if self.first_chunk_at is None and raw:
            self.first_chunk_at = self._clock()
        if self.failed:
            return b""  # the client's stream already ended with an error chunk and [DONE]
        return self._to_client(self._translate(raw))

    def end(self) -> bytes:
        """The upstream body ended: flush the translator and the client encoding."""
        tail = b""
        if not self.failed and self._translator is not None:
            tail = self._guarded(self._translator.finish)
        out = self._to_client(tail)
        if self._restorer is not None:
            out += self._client.feed(self._restorer.finish())
        return out + self._client.finish()

    def broken(self, message: str) -> bytes:
        """The upstream body broke off: end the client's stream with an error event and [DONE]
        (a Responses client gets `response.failed`); nothing more is relayed."""
        if self.failed:
            return b""  # already ended with an error chunk
        self.failed = True
        return self._to_client(stream_error_end(message)) + self._client.finish()

    @property
    def completed(self) -> bool:
        """A whole answer went through: the chat stream finished (a finish_reason or [DONE], no
        error chunk) and a translated stream saw the answer's end (stop_reason/message_stop)."""
        translated = self._translator is None or self._translator.completed
        return not self.failed and self.accumulator.completed and translated

    def _translate(self, raw: bytes) -> bytes:
        if self._translator is None:
            return raw
        translator = self._translator
        return self._guarded(lambda: translator.feed(raw))

    def _guarded(self, step: Callable[[], bytes]) -> bytes:
        try:
            return step()
        except Exception:  # never relay untranslated bytes, never leave the client waiting
            log.exception("stream translation failed")
            self.failed = True
            assert self._translator is not None
            return self._translator.fail(TRANSLATION_FAILED)

    def _to_client(self, chat: bytes) -> bytes:
        if not chat:
            return b""
        for event in self._parser.feed(chat):
            self.accumulator.add(event)
        if self._restorer is not None:
            chat = self._restorer.feed(chat)
        return self._client.feed(chat) if chat else b""
