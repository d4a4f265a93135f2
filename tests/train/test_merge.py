"""Two-stage SLERP via mergekit: every tensor equals an independent SLERP with the right layer-wise t."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

from fabrika.errors import ConfigError
from fabrika.train.merge import MergeConfig, grid_search, load_merge_config, slerp_config, two_stage_merge
from fabrika.train.tiny import build_model, build_tokenizer

pytestmark = [pytest.mark.slow, pytest.mark.train]


def slerp_ref(t: float, a: np.ndarray, b: np.ndarray, threshold: float = 0.9995) -> np.ndarray:
    """Textbook SLERP of two whole tensors as flat vectors (t=0 → a), linear when (anti)parallel."""
    x, y = a.reshape(-1).astype(np.float64), b.reshape(-1).astype(np.float64)
    nx, ny = np.linalg.norm(x), np.linalg.norm(y)
    dot = float(np.clip(np.dot(x / (nx if nx > 1e-8 else 1), y / (ny if ny > 1e-8 else 1)), -1, 1))
    if abs(dot) > threshold:
        return ((1 - t) * x + t * y).reshape(a.shape)
    theta = np.arccos(dot)
    out = np.sin((1 - t) * theta) / np.sin(theta) * x + np.sin(t * theta) / np.sin(theta) * y
    return out.reshape(a.shape)


def _load(path: Path) -> dict[str, np.ndarray]:
    from safetensors.numpy import load_file

    return load_file(str(path / "model.safetensors"))


def _t_for(name: str, attn: list[float], default: float) -> float:
    layer = int(name.split(".")[2]) if name.startswith("model.layers.") else None
    if name.split(".")[-2].endswith("norm"):  # input_layernorm, post_attention_layernorm, q_norm, k_norm, norm
        return default
    if "self_attn" in name:
        return attn[layer]
    if "mlp" in name:
        return 1 - attn[layer]
    return default


def _experts(root: Path, arch: str = "qwen2") -> dict[str, str]:
    import torch

    tok = build_tokenizer()
    out = {}
    for name, seed in (("if", 1), ("fc", 2), ("general", 3)):
        model = build_model(tok, seed=seed, arch=arch)
        with torch.no_grad():  # norms start at 1 and biases at 0 in every seed: make them differ too
            for param in model.parameters():
                if param.ndim == 1:
                    param.add_(torch.randn_like(param) * 0.1)
        model.save_pretrained(root / name)
        tok.save_pretrained(root / name)
        out[name] = str(root / name)
    return out


@pytest.fixture(scope="module")
def experts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return _experts(tmp_path_factory.mktemp("experts"))


@pytest.fixture(scope="module")
def qwen3_experts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return _experts(tmp_path_factory.mktemp("qwen3"), arch="qwen3")


@pytest.mark.parametrize("attn", [[0.0, 1.0], [1.0, 0.0]])  # the ends of a grid: where a norm mismatch shows most
def test_qwen3_norms_are_held_at_the_default_t(tmp_path: Path, qwen3_experts: dict[str, str],
                                               attn: list[float]) -> None:
    cfg = MergeConfig(experts=qwen3_experts, attn_t=attn, default_t=0.5, output_dir=str(tmp_path), dtype="float32",
                      keep_stage1=True)
    final = two_stage_merge(cfg, tmp_path / "merged")
    a, b, c = (_load(Path(qwen3_experts[n])) for n in ("if", "fc", "general"))
    stage1, merged = _load(tmp_path / "merged.stage1"), _load(final)
    assert {"model.layers.0.self_attn.q_norm.weight", "model.layers.1.self_attn.k_norm.weight"} <= set(a)
    assert set(merged) == set(a)
    for name in a:  # every tensor, against an independent SLERP
        t = _t_for(name, attn, 0.5)
        if "q_norm" in name or "k_norm" in name:
            assert t == 0.5
        exp1 = slerp_ref(t, a[name], b[name])
        np.testing.assert_allclose(stage1[name], exp1, rtol=1e-5, atol=1e-6, err_msg=f"stage 1 {name} at t={t}")
        np.testing.assert_allclose(merged[name], slerp_ref(0.8, exp1, c[name]), rtol=1e-4, atol=1e-5,
                                   err_msg=f"stage 2 {name}")
    q_norm = "model.layers.0.self_attn.q_norm.weight"
    assert not np.allclose(stage1[q_norm], a[q_norm]) and not np.allclose(stage1[q_norm], b[q_norm])


def test_every_tensor_matches_independent_slerp(tmp_path: Path, experts: dict[str, str]) -> None:
    attn = [0.3, 0.7]  # a layer-wise gradient: layer 0 attention at 0.3, layer 1 at 0.7
    cfg = MergeConfig(experts=experts, attn_t=attn, output_dir=str(tmp_path), dtype="float32", keep_stage1=True)
    final = two_stage_merge(cfg, tmp_path / "merged")
    a, b, c = (_load(Path(experts[n])) for n in ("if", "fc", "general"))
    stage1, merged = _load(tmp_path / "merged.stage1"), _load(final)
    assert set(merged) == set(a) and len(a) == 27
    seen_t = set()
    for name in a:
        t = _t_for(name, attn, 0.5)
        seen_t.add(round(t, 6))
        exp1 = slerp_ref(t, a[name], b[name])
        np.testing.assert_allclose(stage1[name], exp1, rtol=1e-5, atol=1e-6, err_msg=f"stage 1 {name} at t={t}")
        exp2 = slerp_ref(0.8, exp1, c[name])
        np.testing.assert_allclose(merged[name], exp2, rtol=1e-4, atol=1e-5, err_msg=f"stage 2 {name}")
    assert seen_t == {0.3, 0.7, 0.5}  # attention, MLP complements and the default all occurred
    # SLERP is not associative: another order gives another model.
    other = two_stage_merge(cfg.model_copy(update={"order": ["general", "fc", "if"]}), tmp_path / "other")
    assert not np.allclose(_load(other)["model.layers.0.self_attn.q_proj.weight"],
                           merged["model.layers.0.self_attn.q_proj.weight"])


def test_merged_model_loads_and_generates(tmp_path: Path, experts: dict[str, str]) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    final = two_stage_merge(MergeConfig(experts=experts, output_dir=str(tmp_path)), tmp_path / "m")
    tok = AutoTokenizer.from_pretrained(final, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(final, local_files_only=True)
    ids = tok.apply_chat_template([{"role": "user", "content": "Привет"}], add_generation_prompt=True,
                                  return_tensors="pt", return_dict=True)
    torch.manual_seed(0)
    out = model.generate(**ids, max_new_tokens=5, do_sample=False)
    assert out.shape[1] == ids["input_ids"].shape[1] + 5 or tok.eos_token_id in out[0].tolist()
    assert not (tmp_path / "m.stage1").exists()  # the intermediate is removed unless keep_stage1


def test_mismatched_shapes_fail_before_merging(tmp_path: Path, experts: dict[str, str]) -> None:
    tok = build_tokenizer()
    wide = build_model(tok, seed=4, intermediate_size=256)
    wide.save_pretrained(tmp_path / "wide")
    cfg = MergeConfig(experts={**experts, "general": str(tmp_path / "wide")}, output_dir=str(tmp_path / "o"))
    with pytest.raises(ConfigError, match=r"disagree on \d+ tensor shape\(s\), e\.g\. model\.layers\.0\.mlp"):
        two_stage_merge(cfg, tmp_path / "o" / "merged")
    assert not (tmp_path / "o").exists() or not any((tmp_path / "o").iterdir())
    with pytest.raises(ConfigError, match="not a local model directory"):
        two_stage_merge(MergeConfig(experts={**experts, "fc": str(tmp_path / "nope")}, output_dir="x"),
                        tmp_path / "x")


def test_config_errors_name_the_field(tmp_path: Path) -> None:
    p = tmp_path / "m.yaml"
    p.write_text("experts: {if: a, fc: b}\noutput_dir: o\n")
    with pytest.raises(ConfigError, match=r"order names \['general'\]"):
        load_merge_config(p)
    p.write_text("experts: {if: a, fc: b, general: c}\noutput_dir: o\ngrid: [0, 0.5]\n")
    with pytest.raises(ConfigError, match="grid needs eval_command"):
        load_merge_config(p)
    p.write_text("experts: {if: a, fc: b, general: c}\noutput_dir: o\nattn: 0.5\n")
    with pytest.raises(ConfigError, match="attn"):
        load_merge_config(p)
    cfg = slerp_config("A", "B", attn_t=0.3, mlp_t=0.7, default_t=0.5)
    assert cfg["parameters"]["t"] == [{"filter": "norm", "value": 0.5}, {"filter": "self_attn", "value": 0.3},
                                      {"filter": "mlp", "value": 0.7}, {"value": 0.5}]
    assert cfg["merge_method"] == "slerp" and cfg["base_model"] == "A"


def test_parse_score_reads_only_an_explicit_score() -> None:
    import math

    from fabrika.train.merge import parse_score

    assert parse_score("evaluated Qwen3-8B on 3 tasks\nscore: 0.71\n") == 0.71
    assert parse_score("score: 0.2\nscore = 0.5") == 0.5
    assert parse_score('{"score": 0.42, "tasks": 3}') == 0.42
    assert parse_score('loading\n{"score": 1e-2}') == 0.01
    for noise in ("wrote info.json", "Qwen3-8B", "accuracy 0.9", '{"score": "high"}', '{"score": NaN}', ""):
        assert math.isnan(parse_score(noise)), noise


@pytest.mark.parametrize("keep", [True, False])
def test_grid_with_a_missing_command_fails_and_keeps_candidates(tmp_path: Path, experts: dict[str, str],
                                                                keep: bool) -> None:
    from typer.testing import CliRunner

    from fabrika.cli.app import app

    out = tmp_path / "grid"
    cfg_file = tmp_path / "merge.yaml"
    cfg_file.write_text(json.dumps({"experts": experts, "grid": [0.0, 1.0], "output_dir": str(out),
                                    "dtype": "float32", "keep_candidates": keep,
                                    "eval_command": "no-such-eval-command-here {model_dir}"}))
    result = CliRunner().invoke(app, ["train", "merge", str(cfg_file)])
    assert result.exit_code == 2, result.output
    assert "none of 2 candidates was scored" in result.output
    assert (out / "attn_t=0" / "model.safetensors").is_file() and (out / "attn_t=1" / "model.safetensors").is_file()
    assert not (out / "best.json").exists()


def test_grid_search_scores_each_candidate(tmp_path: Path, experts: dict[str, str]) -> None:
    import polars as pl

    key = "model.layers.0.self_attn.q_proj.weight"
    script = tmp_path / "score.py"
    script.write_text(
        "import sys\nfrom safetensors.numpy import load_file\n"
        f"w = load_file(sys.argv[1] + '/model.safetensors')['{key}']\n"
        "print('evaluated 3 tasks'); print('score:', float(w[0, :4].sum()))\n")
    cfg = MergeConfig(experts=experts, grid=[0.0, 0.5, 1.0], output_dir=str(tmp_path / "grid"), dtype="float32",
                      eval_command=f"{sys.executable} {script} {{model_dir}}")
    table = grid_search(cfg)
    disk = pl.read_csv(tmp_path / "grid" / "scores.csv")
    assert disk["attn_t"].to_list() == [0.0, 0.5, 1.0] and disk["mlp_t"].to_list() == [1.0, 0.5, 0.0]
    assert pl.read_parquet(tmp_path / "grid" / "scores.parquet")["score"].to_list() == table["score"].to_list()
    for row in table.iter_rows(named=True):
        w = _load(Path(row["model_dir"]))[key]
        assert row["score"] == pytest.approx(float(w[0, :4].sum()), abs=1e-6)
        assert row["returncode"] == 0
    assert len(set(table["score"].to_list())) == 3
    best = json.loads((tmp_path / "grid" / "best.json").read_text())
    assert best["score"] == max(table["score"].to_list())
    lean = grid_search(cfg.model_copy(update={"output_dir": str(tmp_path / "lean"), "keep_candidates": False}))
    assert lean["score"].to_list() == table["score"].to_list()
    kept = sorted(p.name for p in (tmp_path / "lean").iterdir() if p.is_dir())
    assert kept == [f"attn_t={best['attn_t']:g}"]
    with pytest.raises(ConfigError, match=r"none of 1 candidates was scored \(e\.g\. attn_t=0\.3: exit 3"):
        grid_search(cfg.model_copy(update={"grid": [0.3], "output_dir": str(tmp_path / "g2"),
                                           "eval_command": "exit 3 # {model_dir}"}))
    import polars as pl

    failing = pl.read_csv(tmp_path / "g2" / "scores.csv")
    assert failing["returncode"].to_list() == [3] and np.isnan(failing["score"][0])
