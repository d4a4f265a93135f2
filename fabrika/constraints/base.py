"""The seed-constraint type, instruction rendering and the registry.

A seed constraint is a hand-written instruction family member: Russian
templates with parameter slots, a parameter sampler, and a *trusted* verifier
(written and tested by people, so it runs in-process, not in the sandbox).

Template slots (``string.Formatter`` syntax):

* ``{n}`` — the parameter as is; a list renders as «а», «б» и «в»;
* ``{n:слово}`` — the number with the noun agreed: «1 слово», «5 слов»;
* ``{n:слово:gent}`` — agreed in an oblique case (after «не более»): «1 слова», «2 слов»;
* ``{n:word}`` (an ASCII noun, English templates) — «1 word», «5 words».
"""

from __future__ import annotations

import random
import string
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from fabrika.errors import ConfigError
from fabrika.schemas.ids import derive_seed
from fabrika.textutil.morph import agree
from fabrika.textutil.normalize import nfc, normalize
from fabrika.textutil.segment import strip_markdown

Params = dict[str, Any]
Checker = Callable[[str, Mapping[str, Any]], bool]
Sampler = Callable[[random.Random], Params]


def quote_list(items: list[Any]) -> str:
    """«а», «б» и «в» — how Russian instructions list words."""
    quoted = [f"«{x}»" for x in items]
    if len(quoted) <= 1:
        return "".join(quoted)
    return ", ".join(quoted[:-1]) + " и " + quoted[-1]


def english_plural(noun: str) -> str:
    """Plural of the last word of a regular English noun phrase («data row» → «data rows»)."""
    head, _, last = noun.rpartition(" ")
    last = last + "es" if last.endswith(("s", "ch", "sh", "x")) else last + "s"
    return f"{head} {last}" if head else last


class _RuFormatter(string.Formatter):
    """Formatter whose format spec is a noun to agree with a number (see module doc)."""

    def format_field(self, value: Any, format_spec: str) -> str:
        if format_spec and isinstance(value, int) and format_spec.isascii() and format_spec[0].isalpha():
            return f"{value} {format_spec if value == 1 else english_plural(format_spec)}"
        if format_spec and isinstance(value, int) and not format_spec[0].isdigit():
            noun, _, case = format_spec.partition(":")
            return f"{value} {agree(noun, value, case or 'nomn')}"
        if isinstance(value, (list, tuple)):
            return quote_list(list(value))
        return super().format_field(value, format_spec)


_FORMATTER = _RuFormatter()


@dataclass(frozen=True)
class SeedConstraint:
    """One library constraint. ``check`` is the strict verifier over normalised text.

    ``check`` sees the response through :func:`fabrika.textutil.normalize.normalize`
    (what a reader sees), or through NFC only when ``raw_input`` is set — for
    checks whose standard is about code points, such as JSON (RFC 8259 treats a
    zero-width space or a fullwidth brace as an error, not as what it looks like).
    """

    id: str
    family: str
    templates: tuple[str, ...]
    sampler: Sampler
    check: Checker
    description: str = ""
    templates_en: tuple[str, ...] = ()
    derive: Callable[[Mapping[str, Any]], Params] | None = None
    conflicts: frozenset[str] = field(default=frozenset())
    raw_input: bool = False

    def sample_params(self, rng: random.Random) -> Params:
        """Draw parameters with ``rng`` (deterministic for a seeded rng)."""
        return self.sampler(rng)

    def render(self, params: Mapping[str, Any], lang: str = "ru") -> str:
        """The instruction text; the template is picked by a hash of ``params`` (stable)."""
        templates = self.templates if lang == "ru" else self.templates_en
        if not templates:
            raise ConfigError(f"constraint {self.id!r} has no templates for lang={lang!r}; use lang='ru'")
        tpl = templates[derive_seed(self.id, dict(params)) % len(templates)]
        slots = dict(params)
        if self.derive is not None:
            slots.update(self.derive(params))
        try:
            return _FORMATTER.format(tpl, **slots)
        except (KeyError, IndexError) as exc:
            raise ConfigError(
                f"constraint {self.id!r}: template slot {exc} has no value in params={dict(params)!r}; "
                f"pass params from sample_params()"
            ) from exc

    @property
    def param_keys(self) -> frozenset[str]:
        """The parameter names this constraint takes (those its sampler returns)."""
        return frozenset(self.sampler(random.Random(0)))

    def check_params(self, params: Mapping[str, Any]) -> list[str]:
        """Problems with ``params`` (missing or unknown keys); empty when they fit.

        Use it on parameters that did not come from :meth:`sample_params` (an LLM's, a user's).
        """
        keys = self.param_keys
        problems = [f"{self.id}: missing param {k!r}" for k in sorted(keys - set(params))]
        problems += [f"{self.id}: unknown param {k!r} (takes {sorted(keys)})" for k in sorted(set(params) - keys)]
        return problems

    def _run(self, text: str, params: Mapping[str, Any]) -> bool:
        try:
            return bool(self.check(text, params))
        except (KeyError, TypeError, AttributeError) as exc:
            raise ConfigError(
                f"constraint {self.id!r} cannot use params={dict(params)!r} ({exc!r}); "
                f"pass params with keys {sorted(self.param_keys)}, e.g. from sample_params()"
            ) from exc

    def prepare(self, response: str) -> str:
        """The text ``check`` sees: normalised, or NFC only for ``raw_input`` checks."""
        return nfc(response) if self.raw_input else normalize(response)

    def verify(self, response: str, params: Mapping[str, Any]) -> bool:
        """Strict verdict: does ``response`` satisfy the constraint with ``params``?"""
        return self._run(self.prepare(response), params)

    def verify_loose(self, response: str, params: Mapping[str, Any]) -> bool:
        """IFEval-style loose verdict: strict on any of the relaxed variants.

        Variants: the response, without its first line, without its last line,
        without both — each as is and with markdown stripped. This forgives a
        chatty preface («Конечно! Вот ответ:») or a closing remark.
        """
        return any(self._run(v, params) for v in loose_variants(self.prepare(response)))


def loose_variants(response: str) -> list[str]:
    """The relaxed variants of ``response`` that loose verification tries."""
    lines = response.split("\n")
    base = [
        response,
        "\n".join(lines[1:]).strip(),
        "\n".join(lines[:-1]).strip(),
        "\n".join(lines[1:-1]).strip(),
    ]
    out: list[str] = []
    for v in base + [strip_markdown(b) for b in base]:
        if v.strip() and v not in out:  # an emptied variant would pass every "no X" constraint
            out.append(v)
    return out


REGISTRY: dict[str, SeedConstraint] = {}


def register(c: SeedConstraint) -> SeedConstraint:
    """Add ``c`` to :data:`REGISTRY`; ids are unique."""
    if c.id in REGISTRY:
        raise ValueError(f"duplicate constraint id {c.id!r}")
    REGISTRY[c.id] = c
    return c


def constraint(
    id: str,
    family: str,
    templates: list[str] | tuple[str, ...],
    sampler: Sampler,
    derive: Callable[[Mapping[str, Any]], Params] | None = None,
    *,
    raw_input: bool = False,
) -> Callable[[Checker], Checker]:
    """Decorator form of :func:`register`; the checker's docstring becomes the description."""

    def wrap(fn: Checker) -> Checker:
        register(
            SeedConstraint(
                id=id,
                family=family,
                templates=tuple(templates),
                sampler=sampler,
                check=fn,
                description=(fn.__doc__ or "").strip(),
                derive=derive,
                raw_input=raw_input,
            )
        )
        return fn

    return wrap


RELATIONS = ("at_least", "at_most", "exactly")
RELATION_RU = {"at_least": "не менее", "at_most": "не более", "exactly": "ровно"}
RELATION_EN = {"at_least": "at least", "at_most": "at most", "exactly": "exactly"}


def relation_slots(params: Mapping[str, Any]) -> Params:
    """Derived slots for a ``relation`` param: the Russian words and the case they govern."""
    rel = params["relation"]
    return {"rel": RELATION_RU[rel], "rel_en": RELATION_EN[rel], "case": "nomn" if rel == "exactly" else "gent"}


def compare(count: int, relation: str, n: int) -> bool:
    """``count`` vs ``n`` under ``relation`` (one of :data:`RELATIONS`)."""
    if relation == "at_least":
        return count >= n
    if relation == "at_most":
        return count <= n
    if relation == "exactly":
        return count == n
    raise ConfigError(f"params.relation must be one of {RELATIONS}, got {relation!r}")


def const(**params: Any) -> Sampler:
    """A sampler that always returns ``params`` (for constraints without parameters)."""
    return lambda rng: dict(params)
