"""``python -m fabrika`` runs the CLI."""

from fabrika.cli.app import main

main()
