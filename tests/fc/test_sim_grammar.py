"""The offline sim writes Russian a person can read: agreement by pymorphy3, no slot filler, real-API tool names,
Russian and English enum literals; training prompts carry call ids shaped like a real API's."""

from __future__ import annotations

import json
import re
from pathlib import Path

import polars as pl
import pytest

from fabrika.generators.fc import sim_phrases as ph
from fabrika.generators.fc.sim_catalogue import DOMAINS, PARAMS
from fabrika.schemas import Sample, from_row
from fabrika.schemas.messages import Dialogue
from fabrika.textutil.morph import lemmas
from tests.fc.test_sim_pipeline import run_demo

COUNT_NOUNS = {"билет", "персона", "день", "рубль", "батон", "пакет", "упаковка", "килограмм"}


def test_numerals_agree_with_their_nouns():
    assert [ph.count_phrase(n, "билет", "nomn", "ru") for n in (1, 2, 5, 11, 21, 22)] == \
        ["1 билет", "2 билета", "5 билетов", "11 билетов", "21 билет", "22 билета"]
    assert [ph.say_arg("guests", n, "ru") for n in (1, 2, 5)] == ["на 1 персону", "на 2 персоны", "на 5 персон"]
    assert [ph.say_arg("days", n, "ru") for n in (1, 3, 7)] == ["на 1 день", "на 3 дня", "на 7 дней"]
    assert ph.say_arg("tickets", 1, "en") == "1 ticket" and ph.say_arg("tickets", 5, "en") == "5 tickets"
    assert ph.say_arg("items", [{"title": "молоко", "qty": 1}, {"title": "сыр", "qty": 3}], "ru") == \
        "1 пакет молока и 3 упаковки сыра"


def test_cities_names_and_dates_are_inflected_and_said_in_words():
    assert ph.say_arg("from_city", "Москва", "ru") == "из Москвы"
    assert ph.say_arg("to_city", "Нижний Новгород", "ru") == "в Нижний Новгород"
    assert ph.say_arg("city", "Нижний Новгород", "ru") == "в Нижнем Новгороде"
    assert ph.say_arg("patient_name", "Анна Петрова", "ru") == "на имя Анны Петровой"
    assert ph.say_arg("patient_name", "Иван Смирнов", "ru") == "на имя Ивана Смирнова"
    assert ph.say_arg("specialty", "окулист", "ru") == "к окулисту"
    assert ph.say_arg("date", "2025-03-14", "ru") == "на 14 марта"
    assert ph.say_arg("date", "2025-03-14", "ru", in_words=True) == "на четырнадцатое марта"
    assert ph.say_arg("seat_class", "business", "ru") == "в бизнес-классе"  # an English literal said in Russian
    assert ph.say_arg("delivery_slot", "evening", "ru") == "с доставкой вечером"


@pytest.mark.parametrize("pname,value,text", [
    ("from_city", "Казань", "Найдите поезда из Казани в Самару"),
    ("to_city", "Самара", "Найдите поезда из Казани в Самару"),
    ("date", "2025-09-01", "на первое сентября"),
    ("date", "2025-09-01", "на 1 сентября"),
    ("seat_class", "economy", "полечу в эконом-классе"),
    ("delivery_slot", "afternoon", "привезите после обеда"),
    ("patient_name", "Ольга Кузнецова", "на имя Ольги Кузнецовой"),
    ("guests", 4, "столик на 4 персоны"),
])
def test_the_sim_assistant_reads_the_canonical_value_back(pname, value, text):
    schema = {"enum": PARAMS[pname]["enum"]["ru"]} if PARAMS[pname]["kind"] == "enum" else {}
    assert ph.read_arg(pname, schema, text, "ru") == (True, value)


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory):
    return run_demo(Path(tmp_path_factory.mktemp("grammar")), plans_per_topic=4)


def _episodes(store, lang: str) -> list[Dialogue]:
    df = store.scan_raw("fc.dialogues").collect().filter(pl.col("status") == "ok")
    return [d for d in (Dialogue.model_validate_json(r) for r in df["dialogue"]) if d.lang == lang]


def _known_latin() -> set[str]:
    """Latin words a Russian user may say by design: codes, e-mails, phone numbers and English-by-design enums."""
    out: set[str] = set()
    for p in PARAMS.values():
        pools = list((p.get("values") or {}).values()) if p["kind"] == "code" else []
        if p["kind"] == "enum" and not p.get("spoken_ru"):
            pools.append(p["enum"]["ru"])
        for pool in pools:
            for v in pool:
                out |= {w.lower() for w in re.findall(r"[A-Za-z][A-Za-z0-9.@_-]*", str(v))}
    return out


def test_russian_dialogues_read_as_russian(demo):
    episodes = _episodes(demo, "ru")
    assert len(episodes) >= 20
    tool_names = {t.name for d in episodes for t in d.tools}
    catalogue = {t["name"] for dom in DOMAINS.values() for t in dom["tools"]}
    assert tool_names <= catalogue and all(re.fullmatch(r"[a-z]+(?:_[a-z]+)+", n) for n in tool_names)
    params = {p for d in episodes for t in d.tools for p in (t.function.parameters.get("properties") or {})}
    latin_ok = _known_latin()
    users = [m.content or "" for d in episodes for m in d.messages if m.role == "user"]
    assert users
    for text in users:
        assert text[:1].isupper() and text.rstrip()[-1] in ".?!", text
        assert "  " not in text and ",," not in text and " ," not in text, text
        assert " — " not in text and ": " not in text, text  # no «описание — значение» slot filler
        assert not [n for n in tool_names | params if re.search(rf"(?<!\w){re.escape(n)}(?!\w)", text)], text
        stray = [w for w in re.findall(r"[A-Za-z][A-Za-z0-9.@_-]*", text) if w.lower().rstrip(".") not in latin_ok]
        assert not stray, (text, stray)
        for n, word in re.findall(r"(?<![\w:.-])(\d+) ([а-яё]+)", text):
            noun = next((x for x in COUNT_NOUNS if x in lemmas(word)), None)
            if noun:
                assert word in {ph.count_phrase(int(n), noun, c, "ru").split(" ", 1)[1] for c in ("nomn", "accs")}, text


def test_enum_literals_are_russian_and_english_and_english_ones_are_said_in_russian(demo):
    episodes = _episodes(demo, "ru")
    enums = [v for d in episodes for t in d.tools for p in (t.function.parameters.get("properties") or {}).values()
             for v in p.get("enum") or []]
    assert any(re.search(r"[а-я]", v) for v in enums) and any(re.fullmatch(r"[a-z]+", v) for v in enums)
    spoken = 0
    for d in episodes:
        users = " ".join(m.content or "" for m in d.messages if m.role == "user")
        for m in d.messages:
            for c in m.tool_calls or []:
                for k, v in c.arguments.items():
                    if k in PARAMS and PARAMS[k].get("spoken_ru") and isinstance(v, str) and v not in users:
                        assert any(f in users for f in PARAMS[k]["spoken_ru"][v]), (v, users)
                        spoken += 1
    assert spoken >= 1  # some call carries an English literal the user said in Russian


def test_training_prompts_carry_call_ids_shaped_like_real_ones(demo):
    df = demo.scan_raw("fc.samples").collect()
    samples = [from_row(Sample, r) for r in df.filter(df["status"] == "ok").iter_rows(named=True)]
    ids = [c.id for s in samples for m in s.prompt for c in (m.tool_calls or [])]
    assert ids and all(re.fullmatch(r"call_[A-Za-z0-9]{24}", i or "") for i in ids), ids[:5]
    tool_ids = {m.tool_call_id for s in samples for m in s.prompt if m.role == "tool"}
    assert tool_ids <= set(ids)
    assert not any("_ref" in json.dumps(s.model_dump(mode="json")["prompt"]) for s in samples)
