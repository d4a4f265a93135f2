"""Shared scorers (annotating stages that add score columns) and their gate groups.

Scorers never delete rows: ``filter.language``, ``filter.dedup`` (global),
``filter.decontam``, ``filter.difficulty`` and ``filter.length`` write score
columns keyed by the scored row's ``id``; :mod:`fabrika.filters.gates` turns
thresholds into polars predicates applied at materialisation. Each scorer's
logic is also a plain function (``score_rows``, ``near_duplicate_clusters``,
``score_texts``, ``pass_rate``, ``score_lengths``) usable without the runner.
Their modules are listed in ``fabrika.pipeline.registry.STAGE_MODULES``.
"""
