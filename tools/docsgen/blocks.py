"""A tiny document model with two renderings: Markdown for the site, plain text for the terminal.

Generated pages are built as sections of blocks, so ``kvcanary explain`` prints the same content the site
shows, and neither can gain a section the other lacks.
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Para:
    """A paragraph; inline Markdown (backticks, emphasis) is kept as is in the terminal."""

    text: str


@dataclass(frozen=True)
class Code:
    """A code block."""

    text: str
    lang: str = "python"
    title: str = ""
    highlight: tuple[int, ...] = ()  # 1-based lines to emphasise on the site


@dataclass(frozen=True)
class Link:
    """A reference to another page: ``target`` is a site-relative Markdown path, ``label`` its text."""

    label: str
    target: str
    tail: str = ""


@dataclass(frozen=True)
class Items:
    """A bullet list of text or links."""

    items: tuple[str | Link, ...]


@dataclass(frozen=True)
class Note:
    """An aside (an admonition on the site)."""

    text: str
    kind: str = "note"


Block = Para | Code | Items | Note


@dataclass(frozen=True)
class Section:
    """A titled list of blocks."""

    title: str
    blocks: tuple[Block, ...]


def _md_item(item: str | Link) -> str:
    if isinstance(item, Link):
        return f"[{item.label}]({item.target}){item.tail}"
    return item


def markdown(title: str, lead: Sequence[Block], sections: Sequence[Section]) -> str:
    """The page as Markdown (headings, fenced code with titles, admonitions)."""
    out = [f"# {title}", ""]
    for block in lead:
        out.extend(_md_block(block))
    for section in sections:
        out.extend([f"## {section.title}", ""])
        for block in section.blocks:
            out.extend(_md_block(block))
    return "\n".join(out).rstrip() + "\n"


def _md_block(block: Block) -> list[str]:
    if isinstance(block, Para):
        return [block.text, ""]
    if isinstance(block, Code):
        title = f' title="{block.title.replace("`", "")}"' if block.title else ""
        hl = f' hl_lines="{" ".join(map(str, block.highlight))}"' if block.highlight else ""
        return [f"```{block.lang}{title}{hl}", block.text.rstrip("\n"), "```", ""]
    if isinstance(block, Items):
        return [*(f"- {_md_item(i)}" for i in block.items), ""]
    body = textwrap.indent(block.text, "    ")
    return [f"!!! {block.kind}", "", body, ""]


_MD_LINK = re.compile(r"\[([^\]]+)\]\([^)]+\)")


def plain(md: str) -> str:
    """Inline Markdown for a terminal: links become their text."""
    return _MD_LINK.sub(r"\1", md).replace("**", "")


def _wrap(s: str, width: int, first: str = "", rest: str = "") -> list[str]:
    return textwrap.wrap(plain(s), width, initial_indent=first, subsequent_indent=rest, break_long_words=False,
                         break_on_hyphens=False)


def _text_item(item: str | Link) -> str:
    if isinstance(item, Link):
        return f"{item.label}{item.tail}"
    return item


def text(title: str, lead: Sequence[Block], sections: Sequence[Section], width: int = 100) -> str:
    """The page as plain text for a terminal: underlined headings, indented code."""
    out = [title, "=" * min(len(title), width), ""]
    for block in lead:
        out.extend(_text_block(block, width))
    for section in sections:
        out.extend([section.title, "-" * len(section.title), ""])
        for block in section.blocks:
            out.extend(_text_block(block, width))
    return "\n".join(out).rstrip() + "\n"


def _text_block(block: Block, width: int) -> list[str]:
    if isinstance(block, Para):
        return [*_wrap(block.text, width), ""]
    if isinstance(block, Code):
        head = [f"  {block.title}:"] if block.title else []
        return [*head, *(("    " + ln).rstrip() for ln in block.text.rstrip("\n").splitlines()), ""]
    if isinstance(block, Items):
        lines: list[str] = []
        for item in block.items:
            lines.extend(_wrap(_text_item(item), width, "  - ", "    "))
        return [*lines, ""]
    return [*_wrap(block.text, width, f"{block.kind.capitalize()}: ", "  "), ""]
