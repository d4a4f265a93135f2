"""A rendered chat template does not depend on the day it is rendered on."""

from __future__ import annotations

import datetime as real_datetime

import pytest

from fabrika.schemas import template as template_module
from fabrika.schemas.template import TEMPLATE_DATE, ChatTemplate

LLAMA_LIKE = (
    '{%- if not date_string is defined %}{%- if strftime_now is defined %}'
    '{%- set date_string = strftime_now("%d %b %Y") %}{%- else %}{%- set date_string = "none" %}{%- endif %}'
    '{%- endif %}Today Date: {{ date_string }};'
    "{%- for m in messages %}<{{ m.role }}>{{ m.content }}{%- endfor %}"
)


class _FrozenDatetime(real_datetime.datetime):
    day_offset = 0

    @classmethod
    def now(cls, tz=None):  # type: ignore[override]
        return real_datetime.datetime(2031, 3, 1 + cls.day_offset)


@pytest.mark.parametrize("offset", [0, 17])
def test_strftime_now_renders_the_fixed_date_whatever_the_clock(monkeypatch, offset):
    _FrozenDatetime.day_offset = offset
    monkeypatch.setattr(template_module, "datetime", _FrozenDatetime)
    text = ChatTemplate(LLAMA_LIKE).render([{"role": "user", "content": "привет"}])
    assert text.startswith(f"Today Date: {TEMPLATE_DATE.strftime('%d %b %Y')};")
    assert "2031" not in text


def test_a_template_given_date_string_keeps_it():
    text = ChatTemplate(LLAMA_LIKE).render([{"role": "user", "content": "x"}], date_string="02 Dec 2026")
    assert text.startswith("Today Date: 02 Dec 2026;")
