"""The grpc.aio server hosting the bridge (port 50051 by default)."""

from __future__ import annotations

import grpc
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as pbg

from app.extproc.bridge import ExtProcBridge

# One ext_proc stream per HTTP request, mostly idle while the answer streams: allow many.
MAX_CONCURRENT_STREAMS = 4096


async def start_bridge_server(
    bridge: ExtProcBridge, host: str = "127.0.0.1", port: int = 50051
) -> grpc.aio.Server:
    """Started server; its bound port is `server.svc_sr_port` (0 picks a free one)."""
    server = grpc.aio.server(
        options=[
            ("grpc.max_concurrent_streams", MAX_CONCURRENT_STREAMS),
            ("grpc.max_receive_message_length", 64 * 1024 * 1024),
            ("grpc.max_send_message_length", 64 * 1024 * 1024),
        ]
    )
    pbg.add_ExternalProcessorServicer_to_server(bridge, server)
    bound = server.add_insecure_port(f"{host}:{port}")
    if bound == 0:
        raise OSError(f"cannot listen on {host}:{port}")
    await server.start()
    server.svc_sr_port = bound
    return server
