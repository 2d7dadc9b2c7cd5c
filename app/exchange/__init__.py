"""The one answer path: a RoutePlan and a front door's transport in, the client's answer out.

`exchange.py` (Exchange: begin, respond, whole_body / stream_chunk / stream_end, close,
finish), `client_api.py` (chat and Responses, each translated once), `relay.py` (a streamed
answer), `answer.py` (routing headers and `routing_metadata`), `openai_schemas.py` (the chat
request's wire model). The Ingress (app/api/dataplane.py) and the ext_proc bridge
(app/extproc/bridge.py) are adapters over it.
"""
