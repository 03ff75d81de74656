"""YAML as the config files are read (a serve config, a scenario, a pair.yaml): PyYAML's safe loader, whose YAML
1.1 reads ``1e5`` or ``1.0e5`` as text (it wants a dot and a signed exponent, ``1.0e+5``), with YAML 1.2's floats
added, so that a number written in exponent form is a number (config values are strict: no text is converted to
a number, so ``time_s: 1e300`` would be refused as text), and a key given twice in one mapping refused (PyYAML
keeps the last one silently: a second ``server:`` section replaced the first)."""

from __future__ import annotations

import re
from collections.abc import Hashable
from pathlib import Path
from typing import Any

import yaml

from trcore.errors import ConfigError


class NumberLoader(yaml.SafeLoader):
    """The safe loader with exponent-form floats (``1e5``, ``2.5E-3``, ``.5e2``) read as floats, refusing a key
    given twice in one mapping."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=True)  # type: ignore[no-untyped-call]
            if not isinstance(key, Hashable):
                continue  # SafeLoader's own error names the unhashable key
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"key {key!r} given twice in one mapping", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


NumberLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?([0-9]+(\.[0-9]*)?|\.[0-9]+)[eE][-+]?[0-9]+$"),
    list("-+0123456789."),
)


def load_yaml(text: str) -> Any:
    """``text`` parsed as YAML (safe: no arbitrary objects), exponent-form numbers as floats."""
    return yaml.load(text, Loader=NumberLoader)


def read_utf8(path: str | Path, field: str) -> str:
    """The text of ``path``; bytes that are not UTF-8 are a ConfigError of ``field`` naming the file."""
    try:
        return Path(path).read_text()
    except UnicodeDecodeError as exc:
        raise ConfigError(field, f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None


def load_yaml_file(path: Path, field: str) -> Any:
    """The YAML of file ``path``; text that is not UTF-8 or not YAML is a ConfigError of ``field`` naming the file
    (and the line)."""
    try:
        return load_yaml(read_utf8(path, field))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise ConfigError(field, f"{path}: invalid YAML{where}: {getattr(exc, 'problem', exc)}") from None
