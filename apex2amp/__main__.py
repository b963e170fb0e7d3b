"""`python -m apex2amp` runs the apex2amp command line (as `python -m migrate` does)."""
from migrate.cli import console_main

console_main()
