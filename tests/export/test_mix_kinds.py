"""Kind-level mixing: exact shares across general / IF / FC, seeded, FC shares inside the FC part, and an
infeasible request that names the missing rows per kind. Without `kinds` the FC mixer is unchanged."""

from __future__ import annotations

import random

import polars as pl
import pytest

from fabrika.errors import ConfigError
from fabrika.export.mix import MixConfig, MixInfeasibleError, mix

KINDS = {"general": 0.5, "if": 0.25, "fc": 0.25}


def _frame(n_fc: int = 3000, n_if: int = 800, n_general: int = 900, seed: int = 0) -> pl.DataFrame:
    r = random.Random(seed)
    types = ["tool_call"] * 6 + ["text", "clarification", "irrelevance"]
    rows = [{"id": f"fc{i:05d}", "expert": "fc", "lang": r.choice(["en", "en", "ru"]),
             "target_type": r.choice(types)} for i in range(n_fc)]
    rows += [{"id": f"if{i:05d}", "expert": "if", "lang": "ru", "target_type": "text"} for i in range(n_if)]
    # general rows: half from generic stages (no expert), half from general.samples
    rows += [{"id": f"ge{i:05d}", "expert": None if i % 2 else "general", "lang": r.choice(["ru", "en"]),
              "target_type": "text"} for i in range(n_general)]
    return pl.DataFrame(rows).sample(fraction=1.0, shuffle=True, seed=seed)


def _kind(df: pl.DataFrame) -> pl.Series:
    return df["expert"].fill_null("general")


def test_exact_kind_shares_with_fc_shares_inside_fc() -> None:
    out, rep = mix(_frame(), MixConfig(size=1000, seed=3, kinds=KINDS))
    df = out.collect()
    assert df.height == 1000 and df["id"].n_unique() == 1000
    counts = _kind(df).value_counts().sort("expert")
    assert dict(counts.iter_rows()) == {"fc": 250, "general": 500, "if": 250}
    fc = df.filter(pl.col("expert") == "fc")
    # the reference FC recipe holds inside the 250 FC rows: 175 en / 75 ru, 200 calls / 50 text, 5 irrelevance
    assert (fc["lang"] == "en").sum() == 175 and (fc["target_type"] == "tool_call").sum() == 200
    assert (fc["target_type"] == "irrelevance").sum() == 5
    assert {k["kind"]: (k["rows"], k["achieved_share"]) for k in rep.kinds} == {
        "general": (500, 0.5), "if": (250, 0.25), "fc": (250, 0.25)}
    assert rep.achieved_shares["lang"] == {"en": 0.7, "ru": 0.3}


def test_seeded_and_independent_of_input_order() -> None:
    frame = _frame()
    cfg = MixConfig(size=600, seed=11, kinds=KINDS, dimensions=[])
    a = set(mix(frame, cfg)[0].collect()["id"])
    b = set(mix(frame.sample(fraction=1.0, shuffle=True, seed=5), cfg)[0].collect()["id"])
    c = set(mix(frame, cfg.model_copy(update={"seed": 12}))[0].collect()["id"])
    assert a == b and a != c


def test_infeasible_kind_shares_name_the_missing_rows_per_kind() -> None:
    frame = _frame(n_if=100, n_general=300)
    with pytest.raises(MixInfeasibleError) as err:
        mix(frame, MixConfig(size=1000, kinds=KINDS))
    missing = {m["cell"]["kind"]: (m["needed"], m["available"], m["missing"]) for m in err.value.missing}
    assert missing == {"general": (500, 300, 200), "if": (250, 100, 150)}
    assert "{'kind': 'if'}: need 250, have 100, missing 150" in str(err.value)
    assert isinstance(err.value, ConfigError)


def test_infeasible_fc_shares_inside_the_fc_part_name_the_cell() -> None:
    frame = _frame(n_fc=200)  # 250 FC rows needed: the kind itself is short
    with pytest.raises(MixInfeasibleError, match="'kind': 'fc'"):
        mix(frame, MixConfig(size=1000, kinds=KINDS))
    only_calls = _frame().with_columns(pl.when(pl.col("expert") == "fc").then(pl.lit("tool_call"))
                                       .otherwise(pl.col("target_type")).alias("target_type"))
    with pytest.raises(MixInfeasibleError) as err:
        mix(only_calls, MixConfig(size=1000, kinds=KINDS))
    assert all(m["cell"]["kind"] == "fc" and m["available"] == 0 for m in err.value.missing)


def test_without_kinds_the_fc_mixer_is_unchanged() -> None:
    frame = _frame().filter(pl.col("expert") == "fc")
    a, rep_a = mix(frame, MixConfig(size=500, seed=1))
    assert rep_a.kinds is None
    from fabrika.export.mix import MixDimension, reference_dimensions

    b, _ = mix(frame, MixConfig(size=500, seed=1, dimensions=[MixDimension(**d.model_dump())
                                                               for d in reference_dimensions()]))
    assert a.collect()["id"].to_list() == b.collect()["id"].to_list()


def test_bad_kind_shares_are_config_errors() -> None:
    with pytest.raises(ValueError, match="sum to 1"):
        MixConfig(size=10, kinds={"general": 0.5, "fc": 0.2})
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        MixConfig(size=10, kinds={"general": 1.5, "fc": -0.5})


def test_a_mix_block_in_the_config_takes_kind_shares() -> None:
    from fabrika.export.settings import validate_export_section

    assert validate_export_section({"mix": {"size": 100, "kinds": KINDS}}) == []
    problems = validate_export_section({"mix": {"size": 100, "kinds": {"general": 0.9, "fc": 0.2}}})
    assert problems and problems[0][0] == "export.mix" and "sum to 1" in problems[0][1]
