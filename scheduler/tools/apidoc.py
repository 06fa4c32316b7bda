"""The Python client's API reference, from its docstrings and signatures:
`python -m apollo11.scheduler.tools.apidoc > docs/client-api.md` (`make docs`).

tests/test_apidoc.py fails when the committed page differs from what this writes,
as tests/test_proto.py does for the generated protobuf code: the reference never
drifts from the code.
"""

from __future__ import annotations

import inspect
import re
import typing
from collections.abc import Iterator
from typing import Any

from apollo11.scheduler import client

INTRO = """# The Python client — API reference

Generated from the docstrings by `make docs` (`python -m
apollo11.scheduler.tools.apidoc`); do not edit by hand. The module's own
introduction, then every public name of `apollo11.scheduler.client`: the async
`Client`, the blocking `SyncClient` (the same methods), the errors, and the typed
results.
"""


def _doc(obj: Any) -> str:
    return inspect.cleandoc(obj.__doc__ or "").strip()


def _signature(fn: Any) -> str:
    """`(a: int, *, b: str = '')`: annotations as written (they are strings here:
    postponed), defaults as Python would print them."""
    sig = inspect.signature(fn)
    parts: list[str] = []
    star = False
    for p in sig.parameters.values():
        if p.kind is p.KEYWORD_ONLY and not star:
            parts.append("*")
            star = True
        elif p.kind is p.VAR_POSITIONAL:
            star = True
        stars = "*" if p.kind is p.VAR_POSITIONAL else "**" if p.kind is p.VAR_KEYWORD else ""
        text = stars + p.name
        if p.annotation is not p.empty:
            text += f": {_annotation(p.annotation)}"
        if p.default is not p.empty:
            text += f" = {p.default!r}"
        parts.append(text)
    ret = ""
    if sig.return_annotation is not sig.empty:
        ret = f" -> {_annotation(sig.return_annotation)}"
    return f"({', '.join(parts)}){ret}"


def _annotation(a: Any) -> str:
    text = a if isinstance(a, str) else inspect.formatannotation(a)
    return re.sub(r"\s+", " ", text)


def _members(cls: type) -> Iterator[tuple[str, Any]]:
    for name, member in cls.__dict__.items():
        if name.startswith("_") and name != "__init__":
            continue
        fn = member.fget if isinstance(member, property) else member
        if callable(fn) or isinstance(member, property):
            yield name, member


def render() -> str:
    out = [INTRO, "```", _doc(client), "```", ""]
    for name in client.__all__:
        obj = getattr(client, name)
        if inspect.isclass(obj):
            kind = "exception" if issubclass(obj, BaseException) else "class"
            out += [f"## `{name}` ({kind})", ""]
            doc = _doc(obj)
            if doc and not doc.startswith(f"{name}("):  # not a dataclass's made-up one
                out += [doc, ""]
            if kind == "class" and hasattr(obj, "__dataclass_fields__"):
                fields = ", ".join(
                    f"`{f}`" for f in obj.__dataclass_fields__ if not f.startswith("_")
                )
                out += [f"Fields: {fields}.", ""]
            for mname, member in _members(obj):
                if isinstance(member, property):
                    out += [f"### `{name}.{mname}` (property)", ""]
                    doc = _doc(member.fget)
                else:
                    wrapped = isinstance(member, classmethod | staticmethod)
                    fn = member.__func__ if wrapped else member
                    prefix = "async " if inspect.iscoroutinefunction(fn) else ""
                    shown = name if mname == "__init__" else f"{name}.{mname}"
                    # overloaded: each variant as a caller (and mypy) sees it
                    variants = typing.get_overloads(fn) or [fn]
                    out += [f"### `{prefix}{shown}{_signature(v)}`" for v in variants]
                    out += [""]
                    doc = _doc(fn)
                if doc:
                    out += [doc, ""]
        elif callable(obj):
            out += [f"## `{name}{_signature(obj)}`", ""]
            if _doc(obj):
                out += [_doc(obj), ""]
        else:
            out += [f"## `{name}` = `{obj!r}`", ""]
    return "\n".join(out).rstrip() + "\n"


def main() -> None:
    print(render(), end="")


if __name__ == "__main__":
    main()
