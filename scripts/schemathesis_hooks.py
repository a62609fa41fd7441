"""Schemathesis hooks for the agent's OpenAPI document: tus PATCH bodies are raw bytes under their own
media type (application/offset+octet-stream), which schemathesis does not know how to serialise."""

import schemathesis


@schemathesis.serializer("application/offset+octet-stream")
def offset_octet_stream(ctx, value):
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode()
    return b""
