"""`python -m apex2amp`: the distribution's name as a module; the application lives in `migrate`."""
from migrate import __version__  # noqa: F401 - the version, under the name people import
