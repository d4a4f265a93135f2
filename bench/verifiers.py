"""Cost of the shared text normalisation in the trusted verifiers.

Measures, side by side in one run, on Russian responses with and without the noise
real completions carry (no-break spaces, soft hyphens, stress marks, emoji):

* ``normalize`` vs plain NFC per response (the step every verifier now shares);
* all library verifiers on one response, with a cold and a warm segmentation cache.

Usage: ``python bench/verifiers.py [--n 400]``
"""

from __future__ import annotations

import argparse
import random
import time
import unicodedata

from fabrika.constraints import REGISTRY
from fabrika.textutil.normalize import _fold_table, normalize

SENTENCES = [
    "Москва — столица России, и в ней живёт больше 13 млн человек.",
    "Площадь квартиры 50 кв. м, т. е. немало для центра.",
    "Как вы думаете, стоит ли ехать туда зимой?",
    "Я подумал… и решил остаться дома.",
    "— Привет! — сказал он. — Как дела?",
    "В 1999 г. он уехал в Казань и работал там инженером.",
    "Цена — 1 000 000 рублей, и это без учёта налогов.",
    "Чай и/или кофе подают с 8:00 до 11:00.",
]
NOISE = ["\u00a0", "\u00ad", "\u0301", " 😊", "\u200b"]


def responses(n: int, noisy: bool, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        text = " ".join(rng.sample(SENTENCES, 4)) + f" Вариант {i}."
        if noisy:
            chars = list(text)
            for _ in range(6):
                pos = rng.randrange(1, len(chars))
                chars.insert(pos, rng.choice(NOISE))
            text = "".join(chars)
        out.append(text)
    return out


def per_item(fn, items) -> float:  # noqa: ANN001
    t = time.perf_counter()
    for x in items:
        fn(x)
    return (time.perf_counter() - t) / len(items)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=400)
    args = ap.parse_args()
    t = time.perf_counter()
    _fold_table()
    print(f"fold table built once: {1000 * (time.perf_counter() - t):.0f} ms")
    params = {cid: c.sample_params(random.Random(1)) for cid, c in REGISTRY.items()}

    def verify_all(text: str) -> None:
        for cid, c in REGISTRY.items():
            c.verify(text, params[cid])

    for text in responses(20, True, seed=99):  # load pymorphy3 and lingua before timing
        verify_all(text)

    for noisy in (False, True):
        label = "noisy" if noisy else "plain"
        texts = responses(args.n, noisy)
        nfc = per_item(lambda s: unicodedata.normalize("NFC", s), texts)
        norm = per_item(normalize.__wrapped__, texts)  # uncached: the real per-response cost
        cold = per_item(verify_all, responses(args.n // 4, noisy, seed=7))
        warm = per_item(verify_all, responses(args.n // 4, noisy, seed=7))
        print(
            f"{label}: NFC {1e6 * nfc:.1f} µs, normalize {1e6 * norm:.1f} µs ({norm / nfc:.1f}x NFC); "
            f"{len(REGISTRY)} verifiers per response: {1e3 * cold:.1f} ms cold, {1e3 * warm:.1f} ms warm; "
            f"normalize is {100 * norm / cold:.2f}% of a cold verification"
        )


if __name__ == "__main__":
    main()
