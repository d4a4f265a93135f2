"""Stages that make data: each module registers its stage kinds (listed in :mod:`fabrika.pipeline.registry`).

==================  ==============================================================
``generic.py``      ``generic.prompts`` / ``generic.complete``: prompts from a file, one
                    completion each (the smallest pipeline, ``configs/smoke.yaml``)
``fc/``             function calling: topics → tools → plans → multi-agent dialogues →
                    samples (+ irrelevance and answer-judge stages); ``fc/stages.py`` registers them
``instruct/``       AutoIF-style instruction following: constraints → verifiers →
                    back-translation → queries → responses (+ multi-constraint and multi-turn)
``general/``        general chat: prompt pool → teacher answers → RM scores → SFT/GRPO rows
``parsing.py``      the one parser of untrusted LLM answers into JSON (reasoning, fences,
                    truncation): a failure is a rejection reason, never an exception
==================  ==============================================================

Filters that score or drop rows made here live in :mod:`fabrika.filters`.
"""
