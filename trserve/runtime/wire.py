"""The wire format of every message between TokenRouter's processes: typed msgpack, never pickle.

A message is its class as ``module:QualName``, a newline, then its fields as msgpack (msgspec, as vLLM v1's
engine core uses; 3-4x faster than pickle for the small messages and hand-offs of a step). Only dataclasses of
the modules in :data:`WIRE_MODULES` travel: :func:`encode` refuses anything else (a field msgspec cannot type,
e.g. a routing program object, is a bug of the sender, raised at once; numpy scalars and read-only mappings
are converted to their plain equivalents), and :func:`decode`
builds only those classes, validated against their field types (and their ``__post_init__`` checks). Whatever
else arrives (garbage, an unknown or foreign class, a body that fails validation) raises :class:`WireError`,
which the mailboxes log and drop: one bad message never stops a process.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Mapping
from typing import Any

import msgspec

#: The modules whose dataclasses are messages (the only classes :func:`decode` will build); a room with messages
#: of its own adds its module with :func:`allow_messages_of` when that module is imported.
WIRE_MODULES = {"trcore.request", "trserve.runtime.messages"}
#: Longest class name a message may carry (``module:QualName``).
MAX_NAME_BYTES = 200


def allow_messages_of(module: str) -> None:
    """Let the dataclasses of ``module`` travel (call it from the module that defines them)."""
    WIRE_MODULES.add(module)


class WireError(ValueError):
    """Bytes that are not a message of this project (the receiving loop logs and drops them)."""


def _enc_hook(value: Any) -> Any:
    """Values msgspec does not know but that have a plain equivalent: read-only mappings
    (``BatchingPolicy.table`` is a ``MappingProxyType``) go as maps, numpy scalars as the Python number they
    hold (the receiver validates it against the field's type like any other)."""
    if isinstance(value, Mapping):
        return dict(value)
    if type(value).__module__ == "numpy" and hasattr(value, "item") and getattr(value, "ndim", None) == 0:
        return value.item()
    raise NotImplementedError(f"type {type(value).__qualname__} cannot go on the wire")


_ENCODER = msgspec.msgpack.Encoder(enc_hook=_enc_hook)
_names: dict[type, bytes] = {}
_decoders: dict[bytes, msgspec.msgpack.Decoder[Any]] = {}


def encode(message: Any) -> bytes:
    """A message as bytes on the wire; TypeError for an object that is not a message or has a field of a type
    msgspec cannot encode (the sender must convert it, e.g. a numpy number with ``int()``)."""
    cls = type(message)
    name = _names.get(cls)
    if name is None:
        name = _names[cls] = _wire_name(cls)
    try:
        return name + b"\n" + _ENCODER.encode(message)
    except (TypeError, NotImplementedError, msgspec.EncodeError) as exc:
        raise TypeError(f"a {cls.__qualname__} cannot go on the wire: {exc}") from exc


def _wire_name(cls: type) -> bytes:
    name = f"{cls.__module__}:{cls.__qualname__}".encode()
    if cls.__module__ not in WIRE_MODULES or not dataclasses.is_dataclass(cls):
        raise TypeError(f"{name.decode()} is not a message (a dataclass of {sorted(WIRE_MODULES)})")
    _decoders.setdefault(name, msgspec.msgpack.Decoder(cls, strict=False))
    return name


def decode(data: bytes) -> Any:
    """The message :func:`encode` wrote; :class:`WireError` for anything else."""
    cut = data.find(b"\n", 0, MAX_NAME_BYTES)
    if cut < 0:
        raise WireError(f"no message class name in {len(data)} bytes starting {bytes(data[:40])!r}")
    name = bytes(data[:cut])
    decoder = _decoders.get(name)
    if decoder is None:
        decoder = _decoders[name] = msgspec.msgpack.Decoder(_message_class(name), strict=False)
    try:
        return decoder.decode(memoryview(data)[cut + 1 :])
    except (msgspec.DecodeError, TypeError, ValueError) as exc:  # also a __post_init__ check msgspec did not wrap
        raise WireError(f"a malformed {name.decode(errors='replace')}: {exc}") from None


def _message_class(name: bytes) -> type:
    """The message class ``module:QualName``: a dataclass of :data:`WIRE_MODULES`, nothing else."""
    module, _, qualname = name.decode(errors="replace").partition(":")
    if module not in WIRE_MODULES:
        raise WireError(f"refusing to decode a message of class {name!r} (not of {sorted(WIRE_MODULES)})")
    found: Any = importlib.import_module(module)
    for part in qualname.split("."):
        found = getattr(found, part, None)
    if not isinstance(found, type) or not dataclasses.is_dataclass(found) or found.__module__ != module:
        raise WireError(f"refusing to decode {name!r}: no such message class")
    return found
