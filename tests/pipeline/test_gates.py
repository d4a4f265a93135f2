"""Gates: first failing gate wins, nulls fail, status gate, funnel counts, --set parsing."""

from __future__ import annotations

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fabrika.errors import ConfigError
from fabrika.gates import DROPPED_BY, apply_gates, mark_dropped, parse_set, validate_thresholds


def frame() -> pl.LazyFrame:
    return pl.LazyFrame({
        "id": ["a", "b", "c", "d", "e"],
        "status": ["ok", "ok", "rejected", "ok", "ok"],
        "i": [1, 50, 2, 3, 4],
        "score": [0.9, 0.9, 0.9, 0.05, None],
        "status__judge": ["ok", "ok", "ok", "ok", None],
    })


def test_first_gate_is_recorded_and_funnel_counts() -> None:
    marked, reasons = mark_dropped(frame(), {"testscore": {"min_score": 0.1, "max_i": 10}})
    assert reasons == ["rejected", "rejected", "low_score", "big_i"]
    got = dict(marked.select("id", DROPPED_BY).collect().iter_rows())
    # c is both rejected and fine on score: status gate comes first; e has a null score: it fails
    assert got == {"a": None, "b": "big_i", "c": "rejected", "d": "low_score", "e": "low_score"}
    kept, funnel = apply_gates(frame(), {"testscore": {"min_score": 0.1, "max_i": 10}})
    assert kept.collect()["id"].to_list() == ["a"]
    assert DROPPED_BY not in kept.collect_schema().names()
    assert funnel == {"in": 5, "out": 1, "dropped_rejected": 1, "dropped_low_score": 2, "dropped_big_i": 1}


def test_predicates_apply_only_where_their_columns_exist() -> None:
    lf = pl.LazyFrame({"id": ["a", "b"], "status": ["ok", "ok"], "i": [1, 99]})
    kept, funnel = apply_gates(lf, {"testscore": {"min_score": 0.5, "max_i": 10}})
    # no 'score' column: low_score does not apply; big_i does
    assert kept.collect()["id"].to_list() == ["a"]
    assert funnel == {"in": 2, "out": 1, "dropped_rejected": 0, "dropped_big_i": 1}


def test_annotation_status_rejects_but_missing_annotation_does_not() -> None:
    lf = pl.LazyFrame({"id": ["a", "b", "c"], "status": ["ok"] * 3, "status__judge": ["ok", "rejected", None]})
    kept, funnel = apply_gates(lf, None)
    assert kept.collect()["id"].to_list() == ["a", "c"]
    assert funnel["dropped_rejected"] == 1


def test_defaults_apply_to_groups_not_mentioned() -> None:
    params = validate_thresholds({})
    assert params["testscore"].min_score == 0.0


@pytest.mark.parametrize(
    ("assignment", "message"),
    [
        ("filters.nope.x=1", "unknown gate group 'nope'; known: "),
        ("filters.testscore.min=1", "unknown parameter 'min' of gate 'testscore'; allowed: min_score, max_i"),
        ("filters.testscore.min_score=high", "filters.testscore.min_score"),
        ("filters.testscore.min_score=1.5", "less than or equal to 1"),
        ("testscore", "addressed as filters.GROUP.PARAM=VALUE"),
        ("testscore.min_score=0.5", "write filters.testscore.min_score=0.5"),  # the short form: the fix is named
        ("filters.testscore=0.5", "e.g. filters.language.min_ru_share=0.9"),  # a group is not a threshold
        ("stages.answers.max_items=5", "rerun `fabrika run CONFIG --set stages.answers.max_items=5`"),
    ],
)
def test_parse_set_errors_are_one_line(assignment: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_set([assignment])
    assert message in str(info.value)
    assert "\n" not in str(info.value)


def test_parse_set_merges_over_base_and_types_values() -> None:
    out = parse_set(["filters.testscore.min_score=0.5", "filters.testscore.max_i=7"], {"testscore": {"min_score": 0.1}, "other": {}})
    assert out["testscore"] == {"min_score": 0.5, "max_i": 7}
    assert isinstance(out["testscore"]["max_i"], int)


def test_unknown_group_in_thresholds_is_config_error() -> None:
    with pytest.raises(ConfigError, match="filters.bogus: unknown gate group"):
        validate_thresholds({"bogus": {}})


@settings(max_examples=60, deadline=None)
@given(
    rows=st.lists(
        st.tuples(
            st.sampled_from(["ok", "rejected"]),
            st.one_of(st.none(), st.floats(0, 1, allow_nan=False)),
            st.integers(0, 30),
            st.sampled_from(["ok", "rejected", None]),
        ),
        max_size=40,
    ),
    min_score=st.floats(0, 1, allow_nan=False),
    max_i=st.one_of(st.none(), st.integers(0, 30)),
)
def test_gates_match_a_plain_python_reference(rows: list, min_score: float, max_i: int | None) -> None:
    lf = pl.LazyFrame(
        {
            "id": [str(k) for k in range(len(rows))],
            "status": [r[0] for r in rows],
            "score": [r[1] for r in rows],
            "i": [r[2] for r in rows],
            "status__judge": [r[3] for r in rows],
        },
        schema={"id": pl.String, "status": pl.String, "score": pl.Float64, "i": pl.Int64, "status__judge": pl.String},
    )
    thresholds = {"testscore": {"min_score": min_score, "max_i": max_i}}

    def reference(status: str, score: float | None, i: int, judge: str | None) -> str | None:
        if status != "ok" or judge == "rejected":
            return "rejected"
        if score is None or score < min_score:
            return "low_score"
        if max_i is not None and i > max_i:
            return "big_i"
        return None

    marked, _ = mark_dropped(lf, thresholds)
    got = marked.sort(pl.col("id").cast(pl.Int64)).collect()[DROPPED_BY].to_list()
    want = [reference(*r) for r in rows]
    assert got == want
    kept, funnel = apply_gates(lf, thresholds)
    assert funnel["in"] == len(rows) and funnel["out"] == want.count(None) == kept.collect().height
    assert sum(v for k, v in funnel.items() if k.startswith("dropped_")) == len(rows) - funnel["out"]
