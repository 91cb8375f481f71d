"""Text that others wrote (a node, a cluster's objects), as it reaches the operator's terminal."""

from __future__ import annotations


def shown(text: str) -> str:
    """Node-written text as it reaches a terminal: every character Python does not call printable (C0 and C1
    controls, DEL, line and paragraph separators, format controls such as bidi overrides) escaped, so that a record
    cannot clear the screen, move the cursor or print a line of its own."""
    return "".join(c if c.isprintable() else _escaped(c) for c in text)


def _escaped(character: str) -> str:
    code = ord(character)
    return f"\\x{code:02x}" if code < 0x100 else (f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}")
