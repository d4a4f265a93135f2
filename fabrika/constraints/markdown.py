"""Markdown emphasis as a CommonMark parser sees it (markdown-it-py), for highlight checks.

A regex for ``*…*`` counts «2 * 3 * 4» or a lone «*» pair around spaces as emphasis;
CommonMark's flanking rules do not. One extra rule on top: intraword emphasis
between digits («2*3*4») is multiplication, not a highlight.
"""

from __future__ import annotations

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
