"""The CLI's output: rich on a terminal (colours, boxed tables), plain text in a pipe.

In a pipe nothing is drawn or cut (full ids for grep, awk and cut; an error on one
line), and rich is not even imported: it is a fifth of a command's start-up
(docs/benchmarks.md, "CLI start-up"). Text passed with rich markup (`[red]...[/red]`)
has its tags removed there; `escape()` marks text that must be printed as it is
(rich's own escaping, without importing rich).
"""

from __future__ import annotations

import re
import sys
from typing import Any, TextIO

# rich's markup tags: [bold], [/red], [/], [link=...], [#ff0000]; an escaped one is \[...]
_TAG = re.compile(r"(\\*)(\[[a-z#/@][^[]*?])")


def escape(markup: str) -> str:
    """As rich.markup.escape: `text` printed as it is, whatever brackets it holds."""

    def backslashes(m: re.Match[str]) -> str:
        slashes, text = m.groups()
        return f"{slashes}{slashes}\\{text}"

    markup = _TAG.sub(backslashes, markup)
    if markup.endswith("\\") and not markup.endswith("\\\\"):
        return markup + "\\"
    return markup


def plain(markup: str) -> str:
    """The text rich would print for `markup`, without its styles."""

    def tag(m: re.Match[str]) -> str:
        slashes, text = m.groups()
        if len(slashes) % 2:  # an escaped tag: printed as it is
            return slashes[: len(slashes) // 2] + text
        return slashes[: len(slashes) // 2]

    return _TAG.sub(tag, markup)


class Output:
    """stdout (or stderr): `print` as rich's Console.print."""

    def __init__(self, *, stderr: bool = False) -> None:
        self._stderr = stderr
        self._rich: Any = None

    @property
    def _stream(self) -> TextIO:
        return sys.stderr if self._stderr else sys.stdout

    @property
    def is_terminal(self) -> bool:
        try:
            return self._stream.isatty()
        except ValueError:  # closed
            return False

    def console(self) -> Any:
        """rich's Console for this stream (imported on first use)."""
        if self._rich is None:
            from rich.console import Console

            self._rich = Console(stderr=self._stderr, soft_wrap=self._stderr)
        return self._rich

    def print(
        self, *objects: Any, markup: bool = True, sep: str = " ", end: str = "\n", **options: Any
    ) -> None:
        if self.is_terminal or not all(isinstance(o, str) for o in objects):
            self.console().print(*objects, markup=markup, sep=sep, end=end, **options)
            return
        text = sep.join(objects)
        self._stream.write((plain(text) if markup else text) + end)
        self._stream.flush()
