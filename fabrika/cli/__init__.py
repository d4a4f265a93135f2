"""The ``fabrika`` command line (typer + rich): argument parsing, printing and exit codes only.

==================  ==============================================================
``entry.py``        the ``fabrika`` entry point: a plain ``browse RUN`` is served without
                    the rest of the CLI (start-up time); everything else goes to ``app``
``app.py``          the ``fabrika`` app: ``validate``, ``run``, ``status``, ``refilter``;
                    registers the commands below; exit 2 = user error, 3 = unfinished run
``export_cmd.py``   ``fabrika export RUN``: a version as an SFT/GRPO dataset
``report_cmd.py``   ``fabrika report RUN``: the self-contained HTML page
``estimate_cmd.py`` ``fabrika estimate CONFIG --pilot F``: a pilot run, extrapolated
``stages_cmd.py``   ``fabrika stages [KIND]``: every stage kind and its config fields
``train_cmd.py``    ``fabrika train sft|grpo|merge|tiny`` over :mod:`fabrika.train`
``eval_cmd.py``     ``fabrika eval …``: sampling, judge calibration, FC/IF scoring
``views.py``        rich tables of run state (pure functions of manifest/funnel dicts)
==================  ==============================================================

The logic lives in the packages the commands call (:mod:`fabrika.pipeline`,
:mod:`fabrika.store`, :mod:`fabrika.export`, …), so each is usable without the CLI.
"""
