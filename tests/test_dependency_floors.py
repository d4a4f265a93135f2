"""pyproject.toml floors are honest: the installed versions meet them and the APIs the code needs exist."""

from __future__ import annotations

import re
import tomllib
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"


def _requirements() -> list[Requirement]:
    data = tomllib.loads(PYPROJECT.read_text("utf-8"))
    project = data["project"]
    reqs = list(project["dependencies"])
    for name in ("train", "dev"):
        reqs += project["optional-dependencies"].get(name, [])
    return [Requirement(r) for r in reqs]


@pytest.mark.parametrize("req", _requirements(), ids=lambda r: r.name)
def test_installed_version_meets_the_declared_floor(req: Requirement) -> None:
    try:
        installed = Version(metadata.version(req.name))
    except metadata.PackageNotFoundError:
        pytest.skip(f"{req.name} is not installed here (optional extra)")
    # compare the release only: a local build tag such as torch's +cpu satisfies ==2.13.0
    assert req.specifier.contains(Version(installed.base_version), prereleases=True), \
        f"{req.name} {installed} does not satisfy {req.specifier} from pyproject.toml"


def _floor(name: str) -> Version:
    for req in _requirements():
        if req.name == name:
            floors = [Version(s.version) for s in req.specifier if s.operator in (">=", "==")]
            assert floors, f"{name} has no floor in pyproject.toml"
            return max(floors)
    raise AssertionError(f"{name} is not declared in pyproject.toml")


def test_floors_cover_the_apis_the_code_uses() -> None:
    import datasets
    import polars as pl
    import pyarrow as pa

    # the exporter writes datasets.Json / List features and pyarrow JSON extension arrays
    assert _floor("datasets") >= Version("4.7") and hasattr(datasets, "Json") and hasattr(datasets, "List")
    assert _floor("pyarrow") >= Version("19") and hasattr(pa, "json_")
    # streaming reads
    assert _floor("polars") >= Version("1.34") and hasattr(pl.LazyFrame, "collect_batches")


def test_code_uses_no_api_below_the_floors() -> None:
    """The code calls the APIs the floors were raised for (a floor without a use would be a guess)."""
    root = Path(__file__).resolve().parents[1] / "fabrika"
    text = "\n".join(p.read_text("utf-8") for p in root.rglob("*.py"))
    assert re.search(r"\bpa\.json_\(", text) and re.search(r"\bJson\(\)", text) and "collect_batches" in text


LOCK = PYPROJECT.parent / "requirements-lock.txt"


def _lock() -> dict[str, Version]:
    from packaging.utils import canonicalize_name

    pins: dict[str, Version] = {}
    for line in LOCK.read_text("utf-8").splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        name, sep, version = line.partition("==")
        assert sep and version, f"requirements-lock.txt: {line!r} is not name==version"
        pins[canonicalize_name(name)] = Version(version)
    return pins


def _installed_by_make() -> list[Requirement]:
    """What `make .venv/.dev` installs: the core dependencies and the dev, embed and train extras."""
    extras = tomllib.loads(PYPROJECT.read_text("utf-8"))["project"]["optional-dependencies"]
    return _requirements() + [Requirement(r) for r in extras["embed"]]


@pytest.mark.parametrize("req", _installed_by_make(), ids=lambda r: r.name)
def test_the_lock_pins_every_declared_dependency_within_its_range(req: Requirement) -> None:
    """`make` installs with `pip -c requirements-lock.txt`: a dependency it does not pin would resolve
    to whatever release is newest on the day (and rows would follow it)."""
    from packaging.utils import canonicalize_name

    pins = _lock()
    name = canonicalize_name(req.name)
    assert name in pins, f"{req.name} is not pinned in requirements-lock.txt (run `make lock`)"
    assert req.specifier.contains(Version(pins[name].base_version), prereleases=True), \
        f"requirements-lock.txt pins {req.name}=={pins[name]}, outside {req.specifier} from pyproject.toml"


def test_the_installed_row_deciding_libraries_are_the_locked_releases() -> None:
    """The releases a dataset hash is a function of (fabrika.pipeline.lineage_libraries) are the locked ones."""
    from packaging.utils import canonicalize_name

    from fabrika.pipeline.lineage_libraries import DATA_LIBRARIES

    pins = _lock()
    for distribution in sorted({d for ds in DATA_LIBRARIES.values() for d in ds}):
        try:
            installed = Version(metadata.version(distribution))
        except metadata.PackageNotFoundError:
            continue  # an optional extra not installed here
        locked = pins.get(canonicalize_name(distribution))
        assert locked is not None, f"{distribution} decides rows but is not in requirements-lock.txt"
        assert installed == locked, f"{distribution} {installed} installed, {locked} locked: run `make .venv/.dev`"
