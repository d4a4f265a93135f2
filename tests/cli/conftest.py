"""CLI tests reuse the test stage kinds of tests/pipeline (the ``plugins:`` module ``tests.pipeline.pipeline_stages``)."""
