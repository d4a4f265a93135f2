"""Split a logged prompt into its *template* text and its *variable* parts.

Production prompts are mostly a service's fixed instruction with slots filled
in: an order id, a date, a pasted document, a JSON payload. To find templates
we mask those slots and keep the words around them; the masked values are what
makes two calls of one template differ, so the within-template selection looks
at them.

The normaliser is markdown-aware, and the order of the rules matters (an URL
holds digits, a code block holds everything):

1. fenced code blocks (```…```) and inline code longer than a few characters → ``⟨CODE⟩``;
2. markdown table body rows (header and ``|---|`` separator kept) → ``⟨ROW⟩``;
3. the block after a line that ends with ``:`` when it is long (a pasted text) → ``⟨TEXT⟩``, and a
   long run of text after ``:`` to the end of a line, likewise;
4. URLs → ``⟨URL⟩``, e-mails → ``⟨EMAIL⟩``;
5. long quoted fields («…», "…", '…', “…”) and long bracketed fields ([…], (…), {…}) → ``⟨QUOTE⟩`` / ``⟨FIELD⟩``;
6. the value after a ``key:`` / ``key =`` on a line (``Клиент: Иван Петров``) → ``key: ⟨VAL⟩``;
7. Title-case words inside a sentence (names, cities, products) → ``⟨NAME⟩``;
8. dates and times → ``⟨DATE⟩`` / ``⟨TIME⟩``;
9. ids (UUIDs, hex strings, tokens mixing letters and digits such as ``ORD-58213``) → ``⟨ID⟩``;
10. the remaining numbers → ``⟨NUM⟩``.

Short quotes and brackets stay: «да»/«нет» in an instruction is template text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MASKS = ("⟨CODE⟩", "⟨ROW⟩", "⟨TEXT⟩", "⟨URL⟩", "⟨EMAIL⟩", "⟨QUOTE⟩", "⟨FIELD⟩", "⟨VAL⟩", "⟨NAME⟩", "⟨DATE⟩", "⟨TIME⟩",
         "⟨ID⟩", "⟨NUM⟩")

#: a quoted field at least this long (characters inside) is a variable («да» / «нет» stay)
LONG_QUOTE = 6
#: a bracketed field at least this long is a variable
LONG_FIELD = 24
#: a block after "…:" with at least this many words is a pasted text
LONG_BLOCK_WORDS = 12

_FENCE = re.compile(r"```.*?(?:```|\Z)", re.DOTALL)
_INLINE_CODE = re.compile(r"`[^`\n]{4,}`")
_TABLE_SEP = re.compile(r"^\s*\|?\s*:?-{3,}:?\s*(\|\s*:?-{3,}:?\s*)*\|?\s*$")
_URL = re.compile(r"\b(?:https?://|www\.)[^\s<>()\"'«»]*[^\s<>()\"'«».,:;!?]", re.IGNORECASE)
# "…: <a long run of text to the end of the line>" — pasted content inline
_INLINE_TEXT = re.compile(r"(?m)(:)[ \t]+(?!⟨)([^\n]{%d,})$" % (LONG_BLOCK_WORDS * 5))
_EMAIL = re.compile(r"\b[\w.+-]+@[\w-]+(?:\.[\w-]+)+\b")
_QUOTES = [re.compile(p) for p in (
    r"«[^«»\n]{%d,}»" % LONG_QUOTE, r"\"[^\"\n]{%d,}\"" % LONG_QUOTE, r"“[^“”\n]{%d,}”" % LONG_QUOTE,
    r"(?<!\w)'[^'\n]{%d,}'(?!\w)" % LONG_QUOTE)]
_BRACKETS = [re.compile(p) for p in (
    r"\[[^\[\]\n]{%d,}\]" % LONG_FIELD, r"\([^()\n]{%d,}\)" % LONG_FIELD, r"\{[^{}]{%d,}\}" % LONG_FIELD)]
# "Key: value" — the key is 1-4 words starting a line (optionally a list bullet or bold markers).
_KEY_VALUE = re.compile(r"(?m)((?:^|(?<=[.!?] ))\s*(?:[-*•]\s+)?(?:\*\*)?[\w][\w\-/]*(?: [\w\-/]+){0,3}(?:\*\*)?\s*[:=](?:\*\*)?)"
                        r"[ \t]+(?!⟨)(\S.*)$")
_DATE = re.compile(
    r"\b(?:\d{4}-\d{1,2}-\d{1,2}(?:[T ]\d{1,2}:\d{2}(?::\d{2})?(?:\.\d+)?(?:Z|[+-]\d{2}:?\d{2})?)?"
    r"|\d{1,2}[./]\d{1,2}[./]\d{2,4}"
    r"|\d{1,2}\s+(?:января|февраля|марта|апреля|мая|июня|июля|августа|сентября|октября|ноября|декабря"
    r"|january|february|march|april|may|june|july|august|september|october|november|december)(?:\s+\d{4})?"
    r"|(?:january|february|march|april|may|june|july|august|september|october|november|december)\s+\d{1,2}"
    r"(?:,?\s+\d{4})?)\b", re.IGNORECASE)
_TIME = re.compile(r"\b\d{1,2}:\d{2}(?::\d{2})?\b")
_UUID = re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b", re.IGNORECASE)
_HEX = re.compile(r"\b(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{8,}\b", re.IGNORECASE)
_MIXED_ID = re.compile(r"(?<![\w⟨])#?(?=[\w-]*\d)(?=[\w-]*[^\W\d_])[\w]+(?:[-_][\w]+)*(?![\w⟩])")
_NUMBER = re.compile(r"(?<![\w⟨])[-+]?\d+(?:[ \u00a0]\d{3})*(?:[.,]\d+)?%?(?![\w⟩])")
# A Title-case word (or a run of them) inside a sentence: a name, a city, a product.
_PROPER = re.compile(r"(?<=[\w,;—–-] )(?:[A-ZА-ЯЁ][a-zа-яё]+(?:-[A-ZА-ЯЁ]?[a-zа-яё]+)*)(?: [A-ZА-ЯЁ][a-zа-яё]+)*")
# "1. " / "2) " at a line start is list structure, not a value: shield its digits from the number rule
_LIST_MARKER = re.compile(r"(?m)^(\s*)(\d{1,3})([.)] )")
_SHIELD = "".join(chr(0xE000 + i) for i in range(10))  # private-use code points: not \d, not \w
_PROTECT = str.maketrans("0123456789", _SHIELD)
_UNPROTECT = str.maketrans(_SHIELD, "0123456789")
_SPACES = re.compile(r"[ \t]+")


@dataclass(frozen=True, slots=True)
class Normalized:
    """A prompt split into its template text and the values that were masked out."""

    template: str
    variables: tuple[str, ...]

    @property
    def variable_text(self) -> str:
        """The masked values joined by newlines (what the within-template selection compares)."""
        return "\n".join(self.variables)


class _Masker:
    def __init__(self) -> None:
        self.values: list[str] = []

    def sub(self, pattern: re.Pattern[str], mask: str, text: str, group: int = 0) -> str:
        def repl(m: re.Match[str]) -> str:
            if group:
                self.values.append(m.group(group))
                return m.group(1) + " " + mask
            self.values.append(m.group(0))
            return mask

        return pattern.sub(repl, text)


def _mask_tables(text: str, m: _Masker) -> str:
    out: list[str] = []
    lines = text.split("\n")
    for i, line in enumerate(lines):
        is_row = line.strip().startswith("|") and line.strip().endswith("|") and line.count("|") >= 2
        if is_row and not _TABLE_SEP.match(line):
            nxt = lines[i + 1] if i + 1 < len(lines) else ""
            if _TABLE_SEP.match(nxt):  # the header row names the columns: template text
                out.append(line)
                continue
            m.values.append(line)
            if out and out[-1] == "⟨ROW⟩":
                continue  # a table of any length is one slot
            out.append("⟨ROW⟩")
        else:
            out.append(line)
    return "\n".join(out)


def _mask_blocks(text: str, m: _Masker) -> str:
    """A long block right after a line ending in ':' is pasted content."""
    blocks = re.split(r"(\n\s*\n)", text)
    out: list[str] = []
    prev_intro = False
    for block in blocks:
        if block.strip() == "":
            out.append(block)
            continue
        first, _, rest = block.partition("\n")
        if prev_intro and len(block.split()) >= LONG_BLOCK_WORDS:
            m.values.append(block)
            out.append("⟨TEXT⟩")
        elif first.rstrip().endswith(":") and len(rest.split()) >= LONG_BLOCK_WORDS:
            m.values.append(rest)
            out.append(first + "\n⟨TEXT⟩")
        else:
            out.append(block)
        prev_intro = block.rstrip().endswith(":")
    return "".join(out)


def normalize(text: str) -> Normalized:
    """Mask the variable spans of ``text`` (see the module docstring for the rules, in order)."""
    m = _Masker()
    t = text.replace("\r\n", "\n")
    t = m.sub(_FENCE, "⟨CODE⟩", t)
    t = m.sub(_INLINE_CODE, "⟨CODE⟩", t)
    t = _mask_tables(t, m)
    t = _mask_blocks(t, m)
    t = m.sub(_URL, "⟨URL⟩", t)
    t = m.sub(_EMAIL, "⟨EMAIL⟩", t)
    for q in _QUOTES:
        t = m.sub(q, "⟨QUOTE⟩", t)
    for b in _BRACKETS:
        t = m.sub(b, "⟨FIELD⟩", t)
    t = m.sub(_INLINE_TEXT, "⟨TEXT⟩", t, group=2)
    t = m.sub(_KEY_VALUE, "⟨VAL⟩", t, group=2)
    t = m.sub(_PROPER, "⟨NAME⟩", t)
    t = m.sub(_DATE, "⟨DATE⟩", t)
    t = m.sub(_TIME, "⟨TIME⟩", t)
    t = m.sub(_UUID, "⟨ID⟩", t)
    t = m.sub(_HEX, "⟨ID⟩", t)
    t = m.sub(_MIXED_ID, "⟨ID⟩", t)
    t = _LIST_MARKER.sub(lambda x: x.group(1) + x.group(2).translate(_PROTECT) + x.group(3), t)
    t = m.sub(_NUMBER, "⟨NUM⟩", t)
    t = t.translate(_UNPROTECT)
    t = "\n".join(_SPACES.sub(" ", line).strip() for line in t.split("\n"))
    t = re.sub(r"\n{3,}", "\n\n", t).strip()
    return Normalized(template=t, variables=tuple(v.strip() for v in m.values if v.strip()))
