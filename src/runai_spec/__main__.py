"""`python -m runai_spec` runs the CLI."""

from .cli import main

main()
