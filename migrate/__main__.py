"""`python -m migrate` runs the apex2amp command line."""
from .cli import console_main

console_main()
