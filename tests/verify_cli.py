"""`apex2amp verify ARGS` run inside the test process, through the command line's click group (migrate.cli.main).

Speed only (docs/performance.md, "Suite time"): a `python -m migrate verify` subprocess pays a Python start,
the tool's imports, a fresh zygote that imports torch and, for the resume check, torch in the verify process
too (about 5 s of CPU before the first training step); in the test process torch is imported already and the
zygotes of earlier runs are reused. Arguments, exit code, standard output and standard error are the
command's own. The tests that prove the `python -m migrate verify` entry itself (test_verify.py's
`test_cli_*`) still run it as a subprocess.
"""
import contextlib
import dataclasses
import os
from typing import Optional

from click.testing import CliRunner

from migrate.cli import main


@dataclasses.dataclass
class Completed:
    """What a test reads of the run, named as subprocess.CompletedProcess names it."""
    returncode: int
    stdout: str
    stderr: str


def verify_cli(*args: str, cwd: Optional[str] = None) -> Completed:
    """Exit code, stdout and stderr of `apex2amp verify ARGS` (run in folder `cwd` when given)."""
    with contextlib.chdir(cwd or os.getcwd()):
        result = CliRunner().invoke(main, ["verify", *args], catch_exceptions=False)
    return Completed(result.exit_code, result.stdout, result.stderr)
