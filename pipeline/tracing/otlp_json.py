"""OTLP JSON, the OpenTelemetry Collector's file format: one ``TracesData`` object per line.

Protobuf's own JSON mapping is close but not conformant: OTLP JSON wants trace and
span ids as hex (protobuf gives base64) and enums as integers.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from typing import Any

from google.protobuf.json_format import MessageToDict
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace import ReadableSpan

_ID_KEYS = ("traceId", "spanId", "parentSpanId")


def _hex_ids(obj: dict[str, Any]) -> None:
    for key in _ID_KEYS:
        if obj.get(key):
            obj[key] = base64.b64decode(obj[key]).hex()


def spans_to_otlp_json(spans: Sequence[ReadableSpan]) -> dict[str, Any]:
    """Encode spans as one OTLP JSON ``TracesData`` object."""
    request = encode_spans(spans)
    data: dict[str, Any] = MessageToDict(request, use_integers_for_enums=True)
    for resource_spans in data.get("resourceSpans", []):
        for scope_spans in resource_spans.get("scopeSpans", []):
            for span in scope_spans.get("spans", []):
                _hex_ids(span)
                for link in span.get("links", []):
                    _hex_ids(link)
    return data


def dumps_line(data: dict[str, Any]) -> str:
    return json.dumps(data, ensure_ascii=False, separators=(",", ":")) + "\n"
