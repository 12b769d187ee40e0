"""How config is read: plain dataclasses filled from YAML, with dotted `--set key=value`
overrides. A wrong key or value is one ConfigError line that names the key and the file.

The schema is beside it, harness/config/schema.py (`RunConfig`, for `rollcheck up`,
the load and the scenarios); its `load:` and `engine:` sections are the load's and the
simulator's own settings classes (harness/config/load.py, harness/sim/settings.py).
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from pathlib import Path
from typing import Any

from harness.errors import RollcheckError
from harness.secrets import is_secret_name
from harness.urls import carries_credentials
from harness.yamlsafe import YamlInputError, load_one


class ConfigError(RollcheckError, ValueError):
    """Bad configuration: the message is one line, fit to print as it is."""


MAX_CONFIG_BYTES = 1 << 20  # a config is a few kilobytes
MAX_INT = 1 << 31  # no count or size rollcheck reads is larger
MAX_SECONDS = 10_000_000.0  # about 115 days: longer is a typo


def is_secret(key: str) -> bool:
    """A setting whose value is never echoed (an error shows <hidden> instead): the last
    part of a dotted key, by the one rule (harness/secrets.py)."""
    return is_secret_name(key.rsplit(".", 1)[-1])


def said_set(item: str) -> str:
    """A `--set key=value` as an error may echo it: the value hidden when the key names a
    secret or the value is a URL carrying a user name or password."""
    key = item.split("=", 1)[0]
    return f"{key}=<hidden>" if is_secret(key) or carries_credentials(item) else item


def shown(key: str, value: Any) -> str:
    """A setting's value as an error may echo it: hidden as said_set hides it."""
    said = repr(value)
    return "<hidden>" if is_secret(key) or carries_credentials(said) else said


def load_yaml(path: Path) -> dict:
    try:
        size = Path(path).stat().st_size
        if not Path(path).is_file():
            raise ConfigError(f"config {path} is not a regular file; give a YAML file")
        if size > MAX_CONFIG_BYTES:
            raise ConfigError(
                f"config {path} is {size} bytes, over the {MAX_CONFIG_BYTES} a config may be"
            )
        text = Path(path).read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read config {path}: {exc.strerror}") from None
    try:
        data = load_one(text, str(path)) or {}
    except YamlInputError as exc:
        raise ConfigError(str(exc)) from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the top level must be a mapping of settings")
    return data


def apply_sets(data: dict, sets: list[str]) -> dict:
    """Apply `a.b.c=value` overrides (values parsed as YAML scalars) to a nested dict."""
    out = _deep_copy(data)
    for item in sets:
        key, sep, raw = item.partition("=")
        said = said_set(item)
        if not sep or not key.strip():
            raise ConfigError(f"--set {said!r}: expected key=value, e.g. engine.ttft_s=0.2")
        try:
            value = load_one(raw, f"--set {key}", max_nodes=10_000) if raw.strip() else ""
        except YamlInputError:
            value = raw
        node = out
        parts = key.strip().split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError(f"--set {said!r}: {part} is not a section")
        node[parts[-1]] = value
    return out


def _deep_copy(d: Any) -> Any:
    if isinstance(d, dict):
        return {k: _deep_copy(v) for k, v in d.items()}
    if isinstance(d, list):
        return [_deep_copy(v) for v in d]
    return d


def build(cls: type, data: dict | None, where: str = "") -> Any:
    """Instantiate dataclass cls from data, checking keys and types recursively."""
    data = data or {}
    if not isinstance(data, dict):
        raise ConfigError(f"{where or 'config'}: expected a mapping, got {type(data).__name__}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - set(fields))
    if unknown:
        key = f"{where}.{unknown[0]}" if where else unknown[0]
        raise ConfigError(f"unknown setting {key!r}; known here: {', '.join(sorted(fields))}")
    kwargs = {}
    for name, value in data.items():
        key = f"{where}.{name}" if where else name
        kwargs[name] = _coerce(hints[name], value, key)
    obj = cls(**kwargs)
    validate = getattr(obj, "validate", None)
    if validate is not None:
        try:
            validate()
        except ValueError as exc:
            raise ConfigError(f"{where or 'config'}: {exc}") from None
    return obj


def _coerce(tp: Any, value: Any, key: str) -> Any:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if value is None:
            return None
        for arg in args[1:]:  # int | str: the first that takes the value, else its error
            if arg is str and isinstance(value, str) or arg is int and type(value) is int:
                return value
        return _coerce(args[0], value, key)
    if dataclasses.is_dataclass(tp):
        return build(tp, value, key)
    if origin is list:
        if not isinstance(value, list):
            raise ConfigError(f"{key}: expected a list, got {shown(key, value)}")
        (item,) = typing.get_args(tp) or (Any,)
        return [_coerce(item, v, f"{key}[{i}]") for i, v in enumerate(value)]
    if origin is dict or tp is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{key}: expected a mapping, got {shown(key, value)}")
        return value
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(f"{key}: expected true or false, got {value!r}")
    if tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            if not math.isfinite(value):
                raise ConfigError(f"{key}: expected a finite number, got {value}")
            if key.endswith("_s") and value < 0:
                raise ConfigError(f"{key}: a duration cannot be negative ({value})")
            if key.endswith("_s") and value > MAX_SECONDS:
                raise ConfigError(f"{key}: {value:g} s is over {MAX_SECONDS:g} s; a typo?")
            if abs(value) > MAX_INT:
                raise ConfigError(f"{key}: {value:g} is out of range")
            return float(value)
        raise ConfigError(f"{key}: expected a number, got {shown(key, value)}")
    if tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            if abs(value) > MAX_INT:
                raise ConfigError(f"{key}: {value} is out of range (at most {MAX_INT})")
            return value
        raise ConfigError(f"{key}: expected a whole number, got {shown(key, value)}")
    if tp is str:
        if isinstance(value, (str, int, float)) and not isinstance(value, bool):
            return str(value)
        raise ConfigError(f"{key}: expected text, got {shown(key, value)}")
    return value


def to_dict(obj: Any) -> dict:
    return dataclasses.asdict(obj)
