"""The run config: how it is read (reader.py: YAML into plain dataclasses, `--set`
overrides, one ConfigError line for a wrong key or value) and what it holds
(schema.py: `RunConfig` and its sections, `load_config`).

This package re-exports the reader only: the load's and the simulator's settings
classes are built with it, and the schema imports them.
"""

from harness.config.reader import (
    MAX_CONFIG_BYTES,
    MAX_INT,
    MAX_SECONDS,
    ConfigError,
    apply_sets,
    build,
    is_secret,
    load_yaml,
    shown,
    to_dict,
)

__all__ = [
    "MAX_CONFIG_BYTES",
    "MAX_INT",
    "MAX_SECONDS",
    "ConfigError",
    "apply_sets",
    "build",
    "is_secret",
    "load_yaml",
    "shown",
    "to_dict",
]
