"""Shared scorers (annotating stages that add score columns) and their gate groups.

Scorers never delete rows: ``filter.language``, ``filter.dedup`` (global),
``filter.decontam``, ``filter.difficulty`` and ``filter.length`` write score
columns keyed by the scored row's ``id``; each scorer's module also registers its
gate group (``filters.<name>`` thresholds turned into polars predicates, applied
at materialisation; machinery in :mod:`fabrika.gates`). Each scorer's
logic is also a plain function (``score_rows``, ``near_duplicate_clusters``,
``score_texts``, ``pass_rate``, ``score_lengths``) usable without the runner.
Their modules are listed in ``fabrika.pipeline.registry.STAGE_MODULES``.

In a pipeline (each scorer annotates the stage named in ``input``)::

    stages:
      - {kind: filter.language, name: lang, input: fc.samples, text_field: user, languages: [ru, en]}
      - {kind: filter.dedup, name: dedup, input: fc.samples, text_field: user}   # units: meta.episode_id
      - {kind: filter.decontam, name: decontam, input: fc.samples,
         benchmarks: [{path: bench/ru_mmlu.jsonl, field: question}]}
      - {kind: filter.difficulty, name: difficulty, input: fc.samples, k: 8, model: policy}
      - {kind: filter.length, name: length, input: fc.samples}
    filters:                                   # thresholds; change later with `fabrika refilter --set`
      language: {allowed: [ru, en], min_confidence: 0.5, max_homoglyph_share: 0.0}
      dedup: {keep_representatives_only: true}
      decontam: {max_overlap: 0.5}
      difficulty: {min_pass_rate_exclusive: 0.0, max_pass_rate: 0.8}
      length: {max_tokens: 8192}
"""
