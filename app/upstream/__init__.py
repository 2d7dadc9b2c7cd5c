"""The upstream side of the data plane: calling chat backends and translating protocols.

- `policy`: ReliabilityConfig / FallbackConfig (config file and client share them)
- `targets`: UpstreamTarget (where a candidate model is served)
- `client`: UpstreamClient (pooled httpx, retries, fallback, streaming)
- `sse`: SSE parsing, stream accumulation, encoding and replay
- `responses_api`: OpenAI Responses API <-> chat completions
"""
