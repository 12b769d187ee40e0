"""Gateway logs: parse access and error lines, join them to stream records.

Access formats: rollcheck's nginx JSON format (harness/cluster/local/nginx.py),
ingress-nginx's default `upstreaminfo`, Envoy's (Gateway API implementations,
the llm-d inference gateway): its default text format and JSON, and Traefik's JSON. Envoy has no error
log; its response flags say what nginx's error log says (UC: upstream connection
terminated, UR: upstream reset, DC: the client went away, UF/UH: no upstream), and
they count as the nginx equivalents. Error-log lines join an access line through
nginx's connection number (`*N`) and the time window of the request.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from harness.files import write_atomic
from harness.streams import GatewayLine, StreamRecord


@dataclass
class ErrorLine:
    t: float
    level: str
    connection: int | None
    message: str
    upstream: str | None

    @property
    def prematurely_closed(self) -> bool:
        return "upstream prematurely closed" in self.message


def _last(value: str | None) -> str | None:
    """nginx lists every upstream tried ("a, b : c"); the last one answered."""
    if not value or value.strip() == "-":
        return None
    last = re.split(r", | : ", value.strip())[-1].strip()
    return None if last == "-" else last


def _tried(value: str | None) -> list[str]:
    """Every upstream nginx tried ("a, b : c": b and c after a), without the "-"s."""
    if not value:
        return []
    return [a.strip() for a in re.split(r", | : ", value.strip()) if a.strip() not in ("", "-")]


def parse_json_line(line: str) -> GatewayLine:
    d = json.loads(line)
    if "response_code" in d and "start_time" in d:
        return parse_envoy_json(d)
    if "DownstreamStatus" in d and "StartUTC" in d:
        return parse_traefik_json(d)
    return GatewayLine(
        request_id=d.get("request_id") or None,
        status=int(d["status"]),
        upstream_addr=_last(d.get("upstream_addr")),
        upstream_status=_last(d.get("upstream_status")),
        tried=_tried(d.get("upstream_addr")),
        body_bytes_sent=int(d.get("body_bytes_sent", 0)),
        request_time_s=float(d.get("request_time", 0)),
        end_t=float(d["time"]),
        connection=int(d["connection"]) if d.get("connection") not in (None, "") else None,
    )


# Envoy's response flags, as what nginx would have logged
ENVOY_UPSTREAM_CLOSED = {"UC", "UR"}  # upstream connection terminated / reset: nginx's
#                                       "upstream prematurely closed"
ENVOY_ERRORS = {
    "UC": "upstream connection termination (envoy UC): upstream prematurely closed",
    "UR": "upstream remote reset (envoy UR): upstream prematurely closed",
    "UF": "upstream connection failure (envoy UF)",
    "UH": "no healthy upstream (envoy UH)",
    "UT": "upstream request timeout (envoy UT)",
    "DC": "downstream connection termination (envoy DC)",
}

# [%START_TIME%] "%REQ(:METHOD)% %REQ(X-ENVOY-ORIGINAL-PATH?:PATH)% %PROTOCOL%"
# %RESPONSE_CODE% %RESPONSE_FLAGS% %BYTES_RECEIVED% %BYTES_SENT% %DURATION%
# %RESP(X-ENVOY-UPSTREAM-SERVICE-TIME)% "%REQ(X-FORWARDED-FOR)%" "%REQ(USER-AGENT)%"
# "%REQ(X-REQUEST-ID)%" "%REQ(:AUTHORITY)%" "%UPSTREAM_HOST%"  (Envoy's default format)
# Istio's TEXT format (meshConfig.accessLogFile) is Envoy's with three fields after the
# flags (%RESPONSE_CODE_DETAILS% %CONNECTION_TERMINATION_DETAILS%
# "%UPSTREAM_TRANSPORT_FAILURE_REASON%") and more after the upstream host.
ENVOY_DEFAULT = re.compile(
    r'^\[(?P<start>[^\]]+)\] "(?P<request>[^"]*)" (?P<code>\d+) (?P<flags>\S+) '
    r'(?:(?P<details>\S+) (?P<termination>\S+) "(?P<transport_failure>[^"]*)" )?'
    r"(?P<received>\d+|-) (?P<sent>\d+|-) (?P<duration>\d+|-) (?P<upstream_time>\S+) "
    r'"(?P<xff>[^"]*)" "(?P<agent>[^"]*)" "(?P<req_id>[^"]*)" "(?P<authority>[^"]*)" '
    r'"(?P<upstream>[^"]*)"'
)


def _envoy_time(text: str) -> float:
    return datetime.fromisoformat(text.strip().replace("Z", "+00:00")).timestamp()


def _envoy_line(req_id, code, flags, sent, duration_ms, start, upstream) -> GatewayLine:
    flags_list = [] if flags in (None, "", "-") else str(flags).split(",")
    duration = 0.0 if duration_ms in (None, "", "-") else float(duration_ms) / 1000
    host = None if upstream in (None, "", "-") else re.sub(r"^\w+://", "", str(upstream))
    code = int(code) if code not in (None, "", "-") else 0
    return GatewayLine(
        request_id=None if req_id in (None, "", "-") else str(req_id),
        # Envoy logs 0 when the client left before the response began: nginx's 499
        status=499 if code == 0 and "DC" in flags_list else code,
        upstream_addr=host,
        upstream_status=None,
        body_bytes_sent=0 if sent in (None, "", "-") else int(sent),
        request_time_s=duration,
        end_t=_envoy_time(start) + duration,
        errors=[ENVOY_ERRORS[f] for f in flags_list if f in ENVOY_ERRORS],
        flags=flags_list,
    )


def parse_envoy_line(line: str) -> GatewayLine:
    m = ENVOY_DEFAULT.match(line.strip())
    if not m:
        raise ValueError("not an Envoy default-format line")
    return _envoy_line(
        m["req_id"], m["code"], m["flags"], m["sent"], m["duration"], m["start"], m["upstream"]
    )


def parse_envoy_json(d: dict) -> GatewayLine:
    """Envoy's JSON format, with the key names Envoy Gateway and Istio use."""

    def get(*keys):
        return next((d[k] for k in keys if k in d), None)

    return _envoy_line(
        get("x-request-id", "x_request_id", "request_id"),
        get("response_code"),
        get("response_flags"),
        get("bytes_sent"),
        get("duration"),
        get("start_time"),
        get("upstream_host"),
    )


def parse_traefik_json(d: dict) -> GatewayLine:
    """Traefik's JSON access log (accessLog.format json): the status it answered the client
    (499 when the client left first), the pod it sent the request to (ServiceAddr), the
    request's start and its Duration in nanoseconds, and the X-Request-Id header where
    accessLog.fields.headers keeps it (request_X-Request-Id)."""
    duration = float(d.get("Duration") or 0) / 1e9
    addr = d.get("ServiceAddr") or None
    if addr is None and d.get("ServiceURL"):
        addr = re.sub(r"^\w+://", "", str(d["ServiceURL"])).split("/", 1)[0]
    origin = d.get("OriginStatus")
    return GatewayLine(
        request_id=d.get("request_X-Request-Id") or None,
        status=int(d["DownstreamStatus"]),
        upstream_addr=addr,
        upstream_status=str(origin) if origin else None,
        body_bytes_sent=int(d.get("DownstreamContentSize") or 0),
        request_time_s=duration,
        end_t=_envoy_time(d["StartUTC"]) + duration,
    )


# ingress-nginx's default log-format-upstream (upstreaminfo)
UPSTREAMINFO = re.compile(
    r'^(?P<remote_addr>\S+) - (?P<remote_user>\S+) \[(?P<time_local>[^\]]+)\] "(?P<request>[^"]*)" '
    r"(?P<status>\d{3}) (?P<body_bytes_sent>\d+) \"(?P<referer>[^\"]*)\" \"(?P<agent>[^\"]*)\" "
    r"(?P<request_length>\d+) (?P<request_time>[\d.]+) \[(?P<upstream_name>[^\]]*)\] "
    r"\[(?P<alt_upstream>[^\]]*)\] (?P<upstream_addr>.+?) (?P<upstream_response_length>[\d,: -]+?) "
    r"(?P<upstream_response_time>[\d.,: -]+?) (?P<upstream_status>[\d,: -]+?) (?P<req_id>\S+)$"
)


def parse_upstreaminfo_line(line: str) -> GatewayLine:
    m = UPSTREAMINFO.match(line.strip())
    if not m:
        raise ValueError("not an ingress-nginx upstreaminfo line")
    end = datetime.strptime(m["time_local"], "%d/%b/%Y:%H:%M:%S %z").timestamp()
    return GatewayLine(
        request_id=None if m["req_id"] == "-" else m["req_id"],
        status=int(m["status"]),
        upstream_addr=_last(m["upstream_addr"]),
        upstream_status=_last(m["upstream_status"].strip()),
        tried=_tried(m["upstream_addr"]),
        body_bytes_sent=int(m["body_bytes_sent"]),
        request_time_s=float(m["request_time"]),
        end_t=end,
    )


ERROR_LINE = re.compile(
    r"^(?P<time>\d{4}/\d\d/\d\d \d\d:\d\d:\d\d) \[(?P<level>\w+)\] \d+#\d+: "
    r"(?:\*(?P<conn>\d+) )?(?P<message>.*?)(?:, upstream: \"(?P<upstream>[^\"]*)\")?(?:, host: .*)?$"
)


def parse_error_line(line: str) -> ErrorLine | None:
    m = ERROR_LINE.match(line.strip())
    if not m:
        return None
    # nginx writes the error log in local time without a zone
    t = datetime.strptime(m["time"], "%Y/%m/%d %H:%M:%S").timestamp()
    upstream = m["upstream"]
    if upstream:
        upstream = re.sub(r"^\w+://", "", upstream).split("/", 1)[0]
    return ErrorLine(t, m["level"], int(m["conn"]) if m["conn"] else None, m["message"], upstream)


@dataclass
class Unparsed:
    """Access-log lines in no known format: counted, never dropped silently."""

    count: int = 0
    first: str | None = None

    def add(self, line: str) -> None:
        self.count += 1
        self.first = self.first or line[:300]


# The access-log formats, by how a line starts: every reader goes through this one table
# (a format added here is read everywhere: runs, shared-ingress run folders, the choice
# of a gateway pod's container). JSON: rollcheck's nginx format, Envoy's JSON (Envoy
# Gateway, Istio) or Traefik's; "[": Envoy's default text format; else ingress-nginx's
# upstreaminfo.
_FORMATS = (("{", parse_json_line), ("[", parse_envoy_line), ("", parse_upstreaminfo_line))


def parse_access_line(raw: str) -> GatewayLine:
    """One access line in any known format; ValueError or KeyError when in none."""
    first = raw.lstrip()[:1]
    parse = next(f for start, f in _FORMATS if first == start or not start)
    return parse(raw)


def is_access_line(raw: str) -> bool:
    try:
        parse_access_line(raw)
        return True
    except (ValueError, KeyError):
        return False


def read_access_log(path: Path | None) -> tuple[list[GatewayLine], Unparsed]:
    """Lines in any known format, and the lines that matched none."""
    lines, bad = [], Unparsed()
    if not path or not Path(path).exists():
        return lines, bad
    for raw in Path(path).read_text(errors="replace").splitlines():
        if not raw.strip():
            continue
        try:
            lines.append(parse_access_line(raw))
        except (ValueError, KeyError):
            bad.add(raw)
    return lines, bad


def keep_only_run_lines(access_path: Path, error_path: Path | None, ids: set, errors) -> int:
    """Rewrite gateway logs that were copied into a run folder with this run's lines only:
    a shared ingress serves other tenants, whose lines have no place in a report.
    Returns how many lines were dropped."""
    dropped = 0
    text = Path(access_path).read_text(errors="replace").splitlines()
    kept = []
    for raw in text:
        try:
            ok = parse_access_line(raw).request_id in ids
        except (ValueError, KeyError):
            ok = False
        kept.append(raw) if ok else None
        dropped += not ok
    write_atomic(Path(access_path), (line + "\n" for line in kept))
    if error_path and Path(error_path).exists():
        joined = {(e.t, e.message) for e in errors}
        lines = Path(error_path).read_text(errors="replace").splitlines()
        keep = []
        for raw in lines:
            e = parse_error_line(raw)
            if e is not None and (e.t, e.message) in joined:
                keep.append(raw)
        dropped += len(lines) - len(keep)
        write_atomic(Path(error_path), (line + "\n" for line in keep))
    return dropped


def read_error_log(path: Path | None) -> list[ErrorLine]:
    if not path or not Path(path).exists():
        return []
    out = []
    for raw in Path(path).read_text(errors="replace").splitlines():
        e = parse_error_line(raw)
        if e is not None:
            out.append(e)
    return out


def attach_errors(access: list[GatewayLine], errors: list[ErrorLine]) -> list[ErrorLine]:
    """Join each error line to the access line it belongs to; return the joined ones.

    nginx's error log names the connection (`*N`): joined on it where the access
    format logs `$connection`. ingress-nginx's `upstreaminfo` has no connection
    number, so there an error line joins the line with the same upstream address
    whose request was open at that time (the error log has one-second resolution).
    """
    by_conn: dict[int, list[GatewayLine]] = {}
    by_upstream: dict[str, list[GatewayLine]] = {}
    for line in access:
        if line.connection is not None:
            by_conn.setdefault(line.connection, []).append(line)
        elif line.upstream_addr:
            by_upstream.setdefault(line.upstream_addr, []).append(line)
    joined = []
    for err in errors:
        if err.connection is not None and err.connection in by_conn:
            candidates = by_conn[err.connection]
        else:
            candidates = by_upstream.get(err.upstream or "", [])
        hits = [a for a in candidates if a.start_t - 1 <= err.t <= a.end_t + 1]
        if hits:
            min(hits, key=lambda a: abs(a.end_t - err.t)).errors.append(err.message)
            joined.append(err)
    return joined


def engine_request_id(response_id: str | None) -> str | None:
    """The request id the engine saw, from its response id: vLLM adopts the X-Request-Id
    it receives as `chatcmpl-<id>` (`cmpl-<id>` for completions), and so does the
    simulator."""
    if not response_id:
        return None
    for prefix in ("chatcmpl-", "cmpl-"):
        if response_id.startswith(prefix):
            return response_id[len(prefix) :]
    return None


def record_ids(r: StreamRecord) -> tuple[str, ...]:
    """The ids a record's request may be logged under, the one sent first: a gateway that
    replaced it (Envoy at the edge, unless told to keep it) logged the one the engine
    answered under."""
    engine_id = engine_request_id(r.response_id)
    return (r.request_id,) if engine_id in (None, r.request_id) else (r.request_id, engine_id)


def join_records(records: list[StreamRecord], access: list[GatewayLine]) -> int:
    """Set record.gateway from the access line with the record's request id, or, where a
    gateway replaced that id on the way (Envoy does at the edge unless told to keep
    it), with the id the engine answered under (its response id); return matches."""
    by_id = {a.request_id: a for a in access if a.request_id}
    matched = 0
    for r in records:
        line = next((by_id[i] for i in record_ids(r) if i in by_id), None)
        if line is not None:
            r.gateway = line
            matched += 1
    return matched


def gateway_summary(access: list[GatewayLine], errors: list[ErrorLine]) -> dict:
    status = Counter(str(a.status) for a in access)
    return {
        "status": dict(sorted(status.items())),
        "upstream_prematurely_closed": sum(1 for e in errors if e.prematurely_closed)
        + sum(1 for a in access if ENVOY_UPSTREAM_CLOSED & set(a.flags)),
        "lines": len(access),
        "error_lines": len(errors),
    }
