"""GatewayLine: one access-log line of the gateway, for the request it served; read by
harness/gateway_logs.py from every format it knows, and kept on the record it joins."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

_INT, _OPT_INT = (int,), (int, type(None))
_NUM = (int, float)
_OPT_TEXT = (str, type(None))
_FIELD_TYPES = {
    "request_id": _OPT_TEXT,
    "status": _INT,
    "upstream_addr": _OPT_TEXT,
    "upstream_status": _OPT_TEXT,
    "body_bytes_sent": _INT,
    "request_time_s": _NUM,
    "end_t": _NUM,
    "connection": _OPT_INT,
    "errors": (list,),
    "flags": (list,),
    "tried": (list,),
}


def typed_fields(d: dict, types: dict[str, tuple], default: tuple | None = None) -> dict:
    """The fields of `d` named in `types` (and, with a default, every other key), each of
    its type: a finite number, a list of text; ValueError naming the first that is not.
    A bool is not a number unless the type says bool."""
    out = {}
    for name, value in d.items():
        kinds = types.get(name, default)
        if kinds is None:
            continue
        ok = isinstance(value, kinds) and not (isinstance(value, bool) and bool not in kinds)
        if ok and isinstance(value, float) and not math.isfinite(value):
            ok = False
        if ok and isinstance(value, list) and not all(isinstance(x, str) for x in value):
            ok = False
        if not ok:
            raise ValueError(f"{name} is {type(value).__name__} {str(value)[:40]!r}")
        out[name] = value
    return out


@dataclass
class GatewayLine:
    request_id: str | None
    status: int
    upstream_addr: str | None  # the last upstream tried
    upstream_status: str | None
    body_bytes_sent: int
    request_time_s: float
    end_t: float  # epoch seconds
    connection: int | None = None
    errors: list[str] = field(default_factory=list)
    flags: list[str] = field(default_factory=list)  # Envoy's response flags (UC, UR, DC, ...)
    # every upstream tried, in order (nginx lists each retry); [] where the format says one
    tried: list[str] = field(default_factory=list)

    @property
    def start_t(self) -> float:
        return self.end_t - self.request_time_s

    @classmethod
    def from_dict(cls, d: dict) -> GatewayLine:
        """A line read back from a record (a run folder may have been edited by hand):
        every field of the type rollcheck writes, or ValueError naming the first that is
        not."""
        kwargs = typed_fields(d, _FIELD_TYPES)
        missing = [name for name in _REQUIRED if name not in kwargs]
        if missing:
            raise ValueError(f"no field {missing[0]}")
        return cls(**kwargs)


# the fields a line read back must have (the others have defaults)
_REQUIRED = [
    f.name
    for f in dataclasses.fields(GatewayLine)
    if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
]
