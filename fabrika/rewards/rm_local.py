"""A local sequence-classification model as reward model, and its id (weights hashed).

:class:`SequenceClassifierRM` is the scorer behind a local ``rm`` / ``rm_path``; callers get
it through :func:`fabrika.rewards.rm_service.get_reward_model` (one instance per process).
Its own load is thread-safe too. torch and transformers load inside the first call.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any, Sequence

from fabrika.textutil.reasoning import answer_text

__all__ = ["SequenceClassifierRM", "rm_identity"]


def rm_identity(path: str | Path) -> str:
    """A stable id of a local RM: ``<dir name>@<sha256 of its config and weight files>`` (16 hex digits).

    S (scored during training) and α (the teacher's mean, stored per prompt) are only
    comparable under the *same* RM; the teacher-score stage stores this id next to α
    and the IF trainer refuses data whose ``rm_id`` differs from its own RM's. Hashing
    reads every weight file once (about a second per GB).
    """
    import hashlib

    root = Path(path)
    if not root.is_dir():
        raise ValueError(f"rm path {str(root)!r} is not a local directory")
    digest = hashlib.sha256()
    files = sorted(p for p in root.iterdir() if p.is_file() and (p.name == "config.json" or p.suffix in (
        ".safetensors", ".bin", ".pt")))
    if not files:
        raise ValueError(f"rm path {str(root)!r} holds no config.json or weight files")
    for f in files:
        digest.update(f.name.encode())
        with f.open("rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                digest.update(chunk)
    return f"{root.name}@{digest.hexdigest()[:16]}"


class SequenceClassifierRM:
    """A local sequence-classification model used as RM; loads on first call, scores logit 0.

    ``device=None`` picks this rank's GPU (bf16) when there is one, else the CPU (fp32).
    """

    def __init__(self, path: str | Path, *, batch_size: int = 8, device: str | None = None) -> None:
        self.path = Path(path)
        if not self.path.is_dir():
            raise ValueError(f"rm path {str(self.path)!r} is not a local directory; the RM is never downloaded — "
                             "point `rm` at a saved AutoModelForSequenceClassification")
        self.batch_size = batch_size
        self.device = device
        self._model: Any = None
        self._tokenizer: Any = None
        self._lock = threading.Lock()

    def load(self) -> None:
        """Load tokenizer and model once; concurrent first callers wait for the one load (thread-safe)."""
        if self._model is not None:
            return
        with self._lock:
            if self._model is None:
                self._load()

    def _load(self) -> None:
        import os

        import torch
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        device = self.device
        if device is None and torch.cuda.is_available():  # next to the policy: this rank's GPU
            device = f"cuda:{os.environ.get('LOCAL_RANK', '0')}"
        dtype = torch.bfloat16 if device and device.startswith("cuda") else torch.float32
        tokenizer = AutoTokenizer.from_pretrained(self.path, local_files_only=True)
        model = AutoModelForSequenceClassification.from_pretrained(self.path, local_files_only=True, dtype=dtype).eval()
        if device:
            model.to(device)
        self._tokenizer, self._model = tokenizer, model  # published last: a reader never sees half a load

    def _render(self, prompt: Any, completion: Any) -> str:
        """(prompt, visible answer) as the RM's chat template renders it; reasoning never reaches the RM."""
        answer = answer_text(completion)
        if isinstance(prompt, list):
            return self._tokenizer.apply_chat_template(prompt + [{"role": "assistant", "content": answer}],
                                                       tokenize=False)
        return f"{prompt}{answer}"

    def __call__(self, prompts: Sequence[Any], completions: Sequence[Any]) -> list[float]:
        import torch

        self.load()
        texts = [self._render(p, c) for p, c in zip(prompts, completions, strict=True)]
        scores: list[float] = []
        for start in range(0, len(texts), self.batch_size):
            batch = self._tokenizer(texts[start:start + self.batch_size], return_tensors="pt", padding=True,
                                    add_special_tokens=False)
            batch = batch.to(self._model.device)
            with torch.inference_mode():
                scores.extend(self._model(**batch).logits[:, 0].float().tolist())
        return scores
