"""The upstream side of the data plane: calling chat backends and translating protocols.

- reliability and fallback settings: `app.config.reliability` (config file and client share them)
- `targets`: UpstreamTarget (where a candidate model is served)
- `client`: UpstreamClient, the facade: `transport` (pooled httpx, one attempt's phases,
  UpstreamStream), `retry` (attempt loop, fallback, back-off, deadlines), `breaker`
  (circuit breakers), `results` (answers, attempt records, errors), `headers`, `deadlines`
- `wire`: the one chat <-> upstream-protocol translation (`wire_for(target)`), built on
  `messages_request` / `messages_api` / `messages_stream` for messages-style backends
- `sse`: SSE parsing, stream accumulation, encoding and replay

The Responses API (request, answer, stream, store) is the exchange's: app/exchange/responses.
"""
