"""``python -m fabrika`` runs the CLI (:mod:`fabrika.cli.entry`: ``browse`` starts without the full app)."""

from fabrika.cli.entry import main

main()
