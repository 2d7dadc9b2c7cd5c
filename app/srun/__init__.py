"""svc-srun: the standalone model-runtime worker (docs/model-runtime.md) and its router-side helpers.

The worker hosts the same engine as the Ray deployments (`app/runtime`), adds the decision
model, rerank and bundles, and serves them over HTTP (`server.create_app`). Router-side:
`supervisor` (managed worker processes), `client` (HTTP client over UDS or TCP) and
`settings` (the `model_deployments` configuration)."""
