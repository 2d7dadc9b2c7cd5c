"""Building and reading Envoy ext_proc messages (xds-protos, Envoy 1.40).

Envoy 1.40 fills `HeaderValue.raw_value` (bytes), not `value`; both are read, and
only `raw_value` is written.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from envoy.config.core.v3 import base_pb2
from envoy.extensions.filters.http.ext_proc.v3 import processing_mode_pb2 as pm
from envoy.service.ext_proc.v3 import external_processor_pb2 as pb
from envoy.type.v3 import http_status_pb2

OVERWRITE = base_pb2.HeaderValueOption.OVERWRITE_IF_EXISTS_OR_ADD


def read_headers(headers: pb.HttpHeaders) -> dict[str, str]:
    """Lower-cased names, pseudo-headers (`:path`, `:method`, `:status`) included."""
    out: dict[str, str] = {}
    for header in headers.headers.headers:
        value = header.raw_value.decode("utf-8", "replace") if header.raw_value else header.value
        out[header.key.lower()] = value
    return out


def header_option(name: str, value: str) -> base_pb2.HeaderValueOption:
    return base_pb2.HeaderValueOption(
        header=base_pb2.HeaderValue(key=name, raw_value=value.encode("utf-8")), append_action=OVERWRITE
    )


def header_mutation(
    set_headers: Mapping[str, str] | None = None, remove: Iterable[str] = ()
) -> pb.HeaderMutation:
    return pb.HeaderMutation(
        set_headers=[header_option(k, v) for k, v in (set_headers or {}).items()],
        remove_headers=list(remove),
    )


def continue_request_headers(
    set_headers: Mapping[str, str] | None = None, skip_bodies: bool = False
) -> pb.ProcessingResponse:
    response = pb.ProcessingResponse(
        request_headers=pb.HeadersResponse(
            response=pb.CommonResponse(header_mutation=header_mutation(set_headers))
        )
    )
    if skip_bodies:  # not an API the router handles: let the rest of the exchange pass untouched
        response.mode_override.CopyFrom(
            pm.ProcessingMode(
                request_body_mode=pm.ProcessingMode.NONE,
                response_header_mode=pm.ProcessingMode.SKIP,
                response_body_mode=pm.ProcessingMode.NONE,
            )
        )
    return response


def request_body_response(
    body: bytes | None = None,
    set_headers: Mapping[str, str] | None = None,
    remove: Iterable[str] = (),
    clear_route_cache: bool = False,
) -> pb.ProcessingResponse:
    common = pb.CommonResponse(
        header_mutation=header_mutation(set_headers, remove), clear_route_cache=clear_route_cache
    )
    if body is not None:
        common.body_mutation.CopyFrom(pb.BodyMutation(body=body))
    return pb.ProcessingResponse(request_body=pb.BodyResponse(response=common))


def response_headers_response(
    set_headers: Mapping[str, str] | None = None, remove: Iterable[str] = (), stream_body: bool = False
) -> pb.ProcessingResponse:
    response = pb.ProcessingResponse(
        response_headers=pb.HeadersResponse(
            response=pb.CommonResponse(header_mutation=header_mutation(set_headers, remove))
        )
    )
    if stream_body:  # SSE: chunks pass through one by one instead of being buffered whole
        response.mode_override.CopyFrom(pm.ProcessingMode(response_body_mode=pm.ProcessingMode.STREAMED))
    return response


def response_body_response(
    body: bytes | None = None, set_headers: Mapping[str, str] | None = None
) -> pb.ProcessingResponse:
    common = pb.CommonResponse(header_mutation=header_mutation(set_headers))
    if body is not None:
        common.body_mutation.CopyFrom(pb.BodyMutation(body=body))
    return pb.ProcessingResponse(response_body=pb.BodyResponse(response=common))


def immediate(
    status: int, body: bytes, headers: Mapping[str, str] | None = None, content_type: str = "application/json"
) -> pb.ProcessingResponse:
    all_headers = {"content-type": content_type, **(headers or {})}
    return pb.ProcessingResponse(
        immediate_response=pb.ImmediateResponse(
            status=http_status_pb2.HttpStatus(code=status),
            headers=header_mutation(all_headers),
            body=body,
            details="svc-sr",
        )
    )


def passthrough(kind: str) -> pb.ProcessingResponse:
    """The no-op answer to any message kind (fail-open, or nothing to do)."""
    if kind == "request_headers":
        return pb.ProcessingResponse(request_headers=pb.HeadersResponse())
    if kind == "request_body":
        return pb.ProcessingResponse(request_body=pb.BodyResponse())
    if kind == "response_headers":
        return pb.ProcessingResponse(response_headers=pb.HeadersResponse())
    if kind == "response_body":
        return pb.ProcessingResponse(response_body=pb.BodyResponse())
    if kind == "request_trailers":
        return pb.ProcessingResponse(request_trailers=pb.TrailersResponse())
    return pb.ProcessingResponse(response_trailers=pb.TrailersResponse())
