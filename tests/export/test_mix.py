"""Mixing: exact size, exact shares, determinism, order independence, infeasible requests."""

from __future__ import annotations

import random

import polars as pl
import pytest

from fabrika.export.mix import MixConfig, MixDimension, MixInfeasibleError, mix


def _frame(n: int = 6000, seed: int = 0) -> pl.DataFrame:
    r = random.Random(seed)
    types = ["tool_call"] * 6 + ["text", "clarification", "irrelevance"]
    return pl.DataFrame({"id": [f"r{i:06d}" for i in range(n)],
                         "lang": [r.choice(["en", "en", "ru"]) for _ in range(n)],
                         "target_type": [r.choice(types) for _ in range(n)],
                         "payload": list(range(n))})


def test_reference_recipe_hits_exact_shares():
    out, rep = mix(_frame(), MixConfig(size=1000, seed=7))
    df = out.collect()
    assert df.height == 1000 and df["id"].n_unique() == 1000
    assert (df["lang"] == "en").sum() == 700 and (df["lang"] == "ru").sum() == 300
    text = df.filter(pl.col("target_type") != "tool_call")
    assert text.height == 200 and (text["target_type"] == "irrelevance").sum() == 20
    assert rep.achieved_shares == {"lang": {"en": 0.7, "ru": 0.3}, "target_type": {"tool_call": 0.8, "text": 0.2},
                                   "text_kind": {"irrelevance": 0.1, "other": 0.9}}
    assert "payload" in df.columns  # the full rows come back, not just the plan


def test_same_seed_same_rows_regardless_of_input_order():
    frame = _frame()
    a, _ = mix(frame, MixConfig(size=500, seed=1))
    b, _ = mix(frame.sample(fraction=1.0, shuffle=True, seed=99), MixConfig(size=500, seed=1))
    c, _ = mix(frame, MixConfig(size=500, seed=2))
    ids_a, ids_b, ids_c = (x.collect()["id"].to_list() for x in (a, b, c))
    assert sorted(ids_a) == sorted(ids_b) and set(ids_a) != set(ids_c)
    assert ids_a == sorted(ids_a)  # source order kept (the frame is sorted by id)


def test_rounding_keeps_exact_size():
    out, rep = mix(_frame(), MixConfig(size=997, seed=0))
    assert out.collect().height == 997 == sum(c["rows"] for c in rep.cells)


def test_infeasible_request_names_the_missing_rows():
    frame = _frame(1000)
    n_ru = int((frame["lang"] == "ru").sum())
    cfg = MixConfig(size=1000, dimensions=[MixDimension(column="lang", shares={"en": 0.5, "ru": 0.5})])
    with pytest.raises(MixInfeasibleError) as err:
        mix(frame, cfg)
    (short,) = err.value.missing
    assert short["cell"] == {"lang": "ru"} and short["needed"] == 500
    assert short["available"] == n_ru and short["missing"] == 500 - n_ru
    assert f"missing {500 - n_ru}" in str(err.value)


def test_bad_configs_are_rejected_with_the_field():
    with pytest.raises(ValueError, match="sum to 1"):
        MixDimension(column="lang", shares={"en": 0.7, "ru": 0.2})
    with pytest.raises(ValueError, match="earlier"):
        MixConfig(size=5, dimensions=[MixDimension(column="target_type", shares={"a": 1.0}, when={"lang": "en"})])
    with pytest.raises(ValueError, match="lacks"):
        mix(_frame(10).drop("lang"), MixConfig(size=5))
