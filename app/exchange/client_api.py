"""The client-facing APIs a front door accepts, each translated to and from chat once.

The router routes chat completions. `ChatApi` passes the client's chat body and answers
through; `ResponsesApi` (POST /v1/responses) parses a Responses request into a chat body,
renders the chat answer as a Responses object and re-encodes the chat event stream as
Responses events. The exchange holds one `ClientApi` per request; both front doors pick it
by path, so the two cannot translate differently.

With a Responses store (`ConversationStore`, the Ingress's), `prepare()` resolves
`previous_response_id` (404 `previous_response_not_found` for an unknown or expired id)
and every answer that reaches the client whole (a finished stream included) is kept by
`persist()`, which the front door awaits before the answer's last bytes leave, so a client
can continue the conversation as soon as it has the answer. Without one (the ext_proc
bridge), `previous_response_id` answers 400 and nothing is kept.

With a files store (`ResolveImageFile`, app/exchange/responses/images.py), `prepare()` also reads
the images that `input_image` parts name by `file_id` (400 `file_not_found` /
`invalid_image_file`, 503 `file_store_unavailable`), which the chat body then carries inline as
data URLs (and so does the stored conversation). Without one, such a part answers 400.
"""

from __future__ import annotations

from typing import Any, Protocol

from pydantic import ValidationError

from app.common.errors import SvcError, bad_request, validation_message
from app.exchange.openai_schemas import validate_chat_body
from app.exchange.responses.answer import ChatToResponsesStream, chat_to_response
from app.exchange.responses.images import ImageFile, ResolveImageFile, resolve_input_images
from app.exchange.responses.request import ResponsesRequest, responses_to_chat
from app.exchange.responses.stored import ConversationStore, StoredResponse, provider_state, stored_response
from app.pipeline.plan import ProviderState
from app.upstream.sse import SSEParser

CHAT_PATH = "/v1/chat/completions"
RESPONSES_PATH = "/v1/responses"


class ClientStream(Protocol):
    """Chat SSE bytes in, the client's SSE bytes out."""

    def feed(self, chat: bytes) -> bytes: ...

    def finish(self) -> bytes: ...


class ClientApi(Protocol):
    endpoint: str  # the metrics label
    # The caller's API key id (None: none): a Responses store keeps it with the answer and
    # reads back only its own (docs/security.md "Keys and budgets"). Set by the exchange.
    owner: str | None

    async def prepare(self, document: Any) -> None:
        """What parsing needs from elsewhere (a stored conversation, uploaded images); raises SvcError."""
        ...

    def parse(self, document: Any) -> dict[str, Any]:
        """The chat body to route from the decoded request body (app/common/body_limits.py
        `decode_json`, by the exchange), validated once (raises SvcError 400 on bad input)."""
        ...

    def render(self, completion: dict[str, Any]) -> dict[str, Any]:
        """A chat.completion (routing_metadata included) as the client's answer."""
        ...

    def stream(self) -> ClientStream: ...

    async def persist(self) -> None:
        """Keep the answer rendered or streamed (a Responses store); never raises."""
        ...

    @property
    def tie(self) -> ProviderState | None:
        """The provider-side state the request continues (after prepare()), for the Router."""
        ...

    def routed(self, model: str | None) -> None:
        """The model serving the answer, kept with it (a Responses store): the Router's choice,
        then the candidate that answered (a fallback's), so a continuation is tied to the model
        that made the stored answer, never to one that failed."""
        ...


class _Passthrough:
    def feed(self, chat: bytes) -> bytes:
        return chat

    def finish(self) -> bytes:
        return b""


class ChatApi:
    endpoint = "chat_completions"
    owner: str | None = None

    async def prepare(self, document: Any) -> None:
        return None

    async def persist(self) -> None:
        return None

    @property
    def tie(self) -> ProviderState | None:
        return None  # a chat request carries its whole conversation: nothing stored ties it

    def routed(self, model: str | None) -> None:
        return None

    def parse(self, document: Any) -> dict[str, Any]:
        return validate_chat_body(document)

    def render(self, completion: dict[str, Any]) -> dict[str, Any]:
        return completion

    def stream(self) -> ClientStream:
        return _Passthrough()


class _ResponsesStream:
    def __init__(self, api: ResponsesApi, request: ResponsesRequest) -> None:
        self._api = api
        self._translator = ChatToResponsesStream(request)
        self._parser = SSEParser()

    def feed(self, chat: bytes) -> bytes:
        return b"".join(out for event in self._parser.feed(chat) for out in self._translator.feed(event))

    def finish(self) -> bytes:
        out = b"".join(self._translator.finish())
        if self._translator.final is not None:
            self._api.remember(self._translator.final)
        return out


def previous_not_found(response_id: str) -> SvcError:
    return SvcError(
        404,
        f"Previous response with id '{response_id}' not found.",
        "invalid_request_error",
        "previous_response_not_found",
        param="previous_response_id",
    )


class ResponsesApi:
    endpoint = "responses"
    owner: str | None = None

    def __init__(
        self, store: ConversationStore | None = None, images: ResolveImageFile | None = None
    ) -> None:
        self._store = store
        self._resolve_image = images
        self._images: dict[str, ImageFile] = {}  # the input_image file ids, read by prepare()
        self._request: ResponsesRequest | None = None
        self._history: list[dict[str, Any]] | None = None
        self._pending: StoredResponse | None = None
        self._tie: ProviderState | None = None
        self._model: str | None = None  # the model that answered (routed()), kept with the answer

    async def prepare(self, document: Any) -> None:
        if self._store is None and self._resolve_image is None:
            return
        request = self._validate(document)
        if self._store is not None:
            await self._continue(self._store, request)
        if self._resolve_image is not None:
            self._images = await resolve_input_images(request.input, self._resolve_image)

    async def _continue(self, store: ConversationStore, request: ResponsesRequest) -> None:
        if request.store is None:  # with a store, responses are kept unless `store: false`
            request = self._request = request.model_copy(update={"store": True})
        if request.previous_response_id:
            previous = await store.get(request.previous_response_id)
            if previous is None or previous.owner != self.owner:  # another key's: as if absent
                raise previous_not_found(request.previous_response_id)
            self._history = previous.conversation
            self._tie = provider_state(previous)

    @property
    def tie(self) -> ProviderState | None:
        return self._tie

    def routed(self, model: str | None) -> None:
        self._model = model

    def parse(self, document: Any) -> dict[str, Any]:
        request = self._request or self._validate(document)
        try:
            body = responses_to_chat(request, self._history, self._images)
        except ValueError as exc:  # ResponsesInputError: input chat cannot hold
            raise bad_request(f"invalid Responses request: {exc}") from exc
        return validate_chat_body(body)

    def _validate(self, document: Any) -> ResponsesRequest:
        try:
            self._request = ResponsesRequest.model_validate(document)
        except ValidationError as exc:
            raise bad_request(f"invalid Responses request: {validation_message(exc.errors())[0]}") from exc
        return self._request

    def render(self, completion: dict[str, Any]) -> dict[str, Any]:
        out = chat_to_response(completion, self._parsed())
        self.remember(out)
        out["routing_metadata"] = completion.get("routing_metadata")
        return out

    def stream(self) -> ClientStream:
        return _ResponsesStream(self, self._parsed())

    def remember(self, response: dict[str, Any]) -> None:
        """Keep `response` at the next persist() (when there is a store and the client lets it)."""
        request = self._parsed()
        if self._store is not None and request.store and response.get("status") != "failed":
            self._pending = stored_response(
                response, request, self._history, self._images, self._model, self.owner
            )

    async def persist(self) -> None:
        record, self._pending = self._pending, None
        if record is not None and self._store is not None:
            await self._store.put(record)

    def _parsed(self) -> ResponsesRequest:
        if self._request is None:
            raise RuntimeError("ResponsesApi used before parse()")
        return self._request


def client_api(path: str, images: ResolveImageFile | None = None) -> ClientApi | None:
    """The API a request path asks for (query string ignored); None: not one the router handles.
    `images`: the files store for Responses input_image file ids (None: they answer 400)."""
    path = path.split("?", 1)[0]
    if path == CHAT_PATH:
        return ChatApi()
    if path == RESPONSES_PATH:
        return ResponsesApi(images=images)
    return None
