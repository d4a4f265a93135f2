"""Markdown as a CommonMark/GFM parser sees it (markdown-it-py): emphasis, headings, tables.

A regex for ``*…*`` counts «2 * 3 * 4» or a lone «*» pair around spaces as emphasis;
CommonMark's flanking rules do not. One extra rule on top: intraword emphasis
between digits («2*3*4») is multiplication, not a highlight.
"""

from __future__ import annotations

import re
from functools import lru_cache

from markdown_it import MarkdownIt
from markdown_it.token import Token

_OPEN = {"em_open": "em_close", "strong_open": "strong_close"}


@lru_cache(maxsize=1)
def _parser() -> MarkdownIt:
    return MarkdownIt("commonmark")


def _text_of(children: list[Token]) -> str:
    return "".join(c.content for c in children if c.type in ("text", "code_inline"))


def emphasis_fragments(text: str) -> list[str]:
    """The text of each outermost emphasis (``*x*``, ``**x**``, ``_x_``) holding a non-space character."""
    out: list[str] = []
    for block in _parser().parse(text):
        if block.type != "inline" or not block.children:
            continue
        kids = block.children
        i = 0
        while i < len(kids):
            tok = kids[i]
            if tok.type not in _OPEN:
                i += 1
                continue
            depth, j = 0, i
            while j < len(kids):
                if kids[j].type in _OPEN:
                    depth += 1
                elif kids[j].type in _OPEN.values():
                    depth -= 1
                    if depth == 0:
                        break
                j += 1
            inner = _text_of(kids[i + 1 : j])
            before = kids[i - 1].content if i > 0 and kids[i - 1].type == "text" else ""
            after = kids[j + 1].content if j + 1 < len(kids) and kids[j + 1].type == "text" else ""
            arithmetic = before[-1:].isdigit() and after[:1].isdigit()
            if inner.strip() and not arithmetic:
                out.append(inner)
            i = j + 1
    return out


@lru_cache(maxsize=1)
def _gfm() -> MarkdownIt:
    return MarkdownIt("commonmark").enable("table")


def atx_headings(text: str) -> int:
    """Markdown headings written with «#» (a «# comment» inside a code block is not one)."""
    return sum(1 for t in _gfm().parse(text) if t.type == "heading_open" and t.markup.startswith("#"))


def _cells(row: str) -> int:
    row = row.strip()
    row = row[1:] if row.startswith("|") else row
    row = row[:-1] if row.endswith("|") and not row.endswith("\\|") else row
    return len(re.split(r"(?<!\\)\|", row))


def tables(text: str) -> list[tuple[int, list[int]]]:
    """Each GFM table: (data rows, cell count of every written row, separator excluded).

    Outer pipes are optional, as in GFM; the cell counts are those written, not the
    parser's padded ones, so a ragged table can be told apart.
    """
    lines = text.split("\n")
    out: list[tuple[int, list[int]]] = []
    toks = _gfm().parse(text)
    for i, tok in enumerate(toks):
        if tok.type != "table_open" or tok.map is None:
            continue
        depth, rows = 0, 0
        for t in toks[i:]:
            depth += t.nesting if t.type in ("table_open", "table_close") else 0
            if t.type == "tr_open":
                rows += 1
            if t.type == "table_close" and depth == 0:
                break
        start, stop = tok.map
        written = [ln for j, ln in enumerate(lines[start:stop]) if j != 1 and ln.strip()]
        out.append((rows - 1, [_cells(ln) for ln in written]))
    return out
