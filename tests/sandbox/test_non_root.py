"""The pool as a non-root user, in the suite (issue 26, item 5): both modes start, judge right, and
contain what the docs say they contain.

As root (CI) the test sets the user up itself (``_as_user.py``: uid 65534 in a private mount
namespace where only the directories on the way to the interpreter and the checkout are made
traversable; nothing on the host changes). As another user it runs as that user. The child
(``_non_root_child.py``) reports; this test asserts:

* bwrap and rlimits pass their self-tests as that user and give the right verdicts (honest
  verifiers; a stateful verifier's concurrent, grouped calls equal its calls one by one);
* bwrap contains every attack of the wave-3 corpus;
* under rlimits exactly the attacks that ``test_attacks_w3.GAPS_ANY_USER``/``GAPS_NON_ROOT`` list are
  not contained, and the containment table in docs/ARCHITECTURE.md says the same for every column.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from tests.sandbox import test_attacks_w3 as corpus
from tests.sandbox._as_user import REPO, run_as_non_root
from tests.sandbox.conftest import require_bwrap

CHILD = Path(__file__).with_name("_non_root_child.py")
DOCS = REPO / "docs" / "ARCHITECTURE.md"
COLUMNS = ("bwrap, root", "bwrap, non-root", "rlimits, root", "rlimits, non-root")


def docs_table() -> dict[str, dict[str, bool]]:
    """attack -> column -> contained, from the containment table in docs/ARCHITECTURE.md."""
    rows: dict[str, dict[str, bool]] = {}
    header: list[str] = []
    for line in DOCS.read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells and cells[0] == "attack (`ATTACKS`)":
            header = cells
            continue
        m = re.fullmatch(r"`([a-z0-9_]+)`", cells[0]) if header and len(cells) == len(header) else None
        if m:
            rows[m.group(1)] = {col: cells[header.index(col)].startswith("contained") for col in COLUMNS}
    return rows


def uncontained(mode: str, root: bool) -> set[str]:
    gaps = {**corpus.GAPS_ANY_USER, **({} if root else corpus.GAPS_NON_ROOT)}
    return {name for name, m in gaps if m == mode}


def test_the_docs_table_covers_the_corpus_and_states_the_root_gaps():
    table = docs_table()
    assert set(table) == {a[0] for a in corpus.ATTACKS}
    for mode in ("bwrap", "rlimits"):
        for root, col in ((True, f"{mode}, root"), (False, f"{mode}, non-root")):
            assert {name for name, cols in table.items() if not cols[col]} == uncontained(mode, root), col


@pytest.fixture(scope="module")
def report() -> dict:
    require_bwrap()
    done = run_as_non_root(CHILD, timeout_s=900)
    assert done.returncode == 0, f"the non-root child failed ({done.returncode}): {done.stderr[-3000:]}"
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_it_really_ran_as_another_user(report):
    assert report["uid"] != 0
    if os.getuid() != 0:
        assert report["uid"] == os.getuid()


@pytest.mark.parametrize("mode", ["bwrap", "rlimits"])
def test_both_modes_pass_the_self_test_and_judge_right(report, mode):
    got = report["modes"][mode]
    assert got["self_test"] == "ok", got["self_test"]
    assert got["isolation"] == mode
    assert got["honest"] == {name: expected for name, (_, _, expected) in corpus.HONEST.items()}
    assert got["one_by_one"][0] == ["true", "false", "true"]
    assert got["one_by_one"][2] == ["true", "timeout", "true", "false"]
    assert got["grouped"] == got["one_by_one"]


@pytest.mark.parametrize("mode", ["bwrap", "rlimits"])
def test_what_is_contained_as_non_root_is_what_the_docs_say(report, mode):
    attacks = report["modes"][mode]["attacks"]
    assert set(attacks) == {a[0] for a in corpus.ATTACKS}
    seen = {name for name, problems in attacks.items() if problems}
    assert seen == uncontained(mode, root=False), {name: attacks[name] for name in seen ^ uncontained(mode, False)}
    table = docs_table()
    assert {name for name, cols in table.items() if not cols[f"{mode}, non-root"]} == seen
