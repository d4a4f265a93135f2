"""Text helpers of the topic stage: keyword tokenisation, language checks, near-duplicate index.

Russian keywords are lemmatised with pymorphy3 over razdel tokens so that
«погоды», «погоде» and «погода» count as one c-TF-IDF term.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from datasketch import MinHash

_CYR = re.compile(r"[а-яё]", re.IGNORECASE)
_LAT = re.compile(r"[a-z]", re.IGNORECASE)

RU_STOPWORDS = frozenset(
    """и в во не что он на я с со как а то все она так его но да ты к у же вы за бы по только ее её мне было
    вот от меня еще ещё нет о из ему теперь когда даже ну вдруг ли если уже или ни быть был него до вас нибудь
    опять уж вам ведь там потом себя ничего ей может они тут где есть надо ней для мы тебя их чем была сам чтоб
    без будто чего раз тоже себе под будет ж тогда кто этот того потому этого какой совсем ним здесь этом один
    почти мой тем чтобы нее неё сейчас были куда зачем всех никогда можно при наконец два об другой хоть после над
    больше тот через эти нас про всего них какая много разве три эту моя впрочем хорошо свою этой перед иногда
    лучше чуть том нельзя такой им более всегда конечно всю между это мочь весь свой который стоить сколько
    какой ваш наш час день""".split()
)


def cyrillic_share(text: str) -> float:
    """Share of Cyrillic among the letters of ``text`` (0 when there are no letters)."""
    cyr = len(_CYR.findall(text))
    lat = len(_LAT.findall(text))
    return cyr / (cyr + lat) if cyr + lat else 0.0


def language_ok(text: str, lang: str, min_share: float = 0.6) -> bool:
    """Cheap script check: Russian text is mostly Cyrillic, English mostly Latin."""
    share = cyrillic_share(text)
    if lang == "ru":
        return share >= min_share
    if lang == "en":
        return share <= 1 - min_share and bool(_LAT.search(text))
    return True


@lru_cache(maxsize=1)
def _morph():
    import pymorphy3

    return pymorphy3.MorphAnalyzer()


@lru_cache(maxsize=200_000)
def _lemma(word: str) -> str:
    return _morph().parse(word)[0].normal_form


def keyword_tokens(text: str, lang: str) -> list[str]:
    """Lower-cased content words (lemmas for Russian), stop words and short tokens removed."""
    from razdel import tokenize

    words = [t.text.lower() for t in tokenize(text)]
    out = []
    for w in words:
        if len(w) < 3 or not w.isalpha():
            continue
        if lang == "ru" and _CYR.search(w):
            w = _lemma(w)
            if w in RU_STOPWORDS:
                continue
        elif lang == "en":
            from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS

            if w in ENGLISH_STOP_WORDS:
                continue
        out.append(w)
    return out


def normalise_label(label: str) -> str:
    return " ".join(re.sub(r"[^\w\s-]", " ", label.lower().replace("ё", "е")).split())


class NearDuplicateIndex:
    """MinHash LSH over keyword lemmas and their bigrams; first come, first kept.

    Exact duplicates (after normalisation) are caught even when the label has a
    single keyword, which MinHash alone handles poorly.
    """

    def __init__(self, lang: str, threshold: float = 0.6, num_perm: int = 64) -> None:
        self.lang = lang
        self.num_perm = num_perm
        from datasketch import MinHashLSH  # imported on use: it pulls scipy (~0.4 s of every process's start)

        self._lsh = MinHashLSH(threshold=threshold, num_perm=num_perm)
        self._exact: dict[str, str] = {}

    def _minhash(self, text: str) -> MinHash | None:
        toks = keyword_tokens(text, self.lang)
        feats = set(toks) | {f"{a} {b}" for a, b in zip(toks, toks[1:])}
        if not feats:
            return None
        from datasketch import MinHash

        mh = MinHash(num_perm=self.num_perm, seed=1)
        for f in sorted(feats):
            mh.update(f.encode("utf-8"))
        return mh

    def add_if_new(self, key: str, label: str, description: str = "") -> str | None:
        """Insert ``key`` unless it duplicates an earlier item; return the earlier key if so."""
        norm = normalise_label(label)
        if norm in self._exact:
            return self._exact[norm]
        mh = self._minhash(f"{label} {description}")
        if mh is not None:
            hits = sorted(self._lsh.query(mh))
            if hits:
                return hits[0]
            self._lsh.insert(key, mh)
        self._exact[norm] = key
        return None
