"""A launcher's flag validators checked on many command lines in one subprocess.

Each `launch/*.py` test that runs a bad command line as its own subprocess pays the launcher's
imports (JAX, Flax, transformers) again; parsing every case in one interpreter with the module's
own absl flags and validators checks the same rules for the price of one import. One real command
line per launcher still goes through `app.run` (exit status, message on stderr, no traceback).
"""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

_PARSE_EACH = """
import importlib.util, json, sys
from absl import flags
spec = importlib.util.spec_from_file_location("launcher", sys.argv[1])
spec.loader.exec_module(importlib.util.module_from_spec(spec))
errors = []
for argv in json.loads(sys.argv[2]):
    flags.FLAGS.unparse_flags()
    try:
        flags.FLAGS([sys.argv[1], *argv])
        errors.append("")
    except flags.Error as error:
        errors.append(str(error))
print(json.dumps(errors))
"""


def assert_flag_errors(script: str, cases: list[tuple[list[str], str]]) -> None:
    """Parses each (command line, expected message) of `cases` with the flags of the launcher
    `script` (relative to the repository): its error, as `app.run` reports it, names the
    message; an empty message means the command line must parse."""
    argvs = json.dumps([argv for argv, _ in cases])
    out = subprocess.run([sys.executable, "-c", _PARSE_EACH, str(ROOT / script), argvs], cwd=ROOT,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    errors = json.loads(out.stdout.splitlines()[-1])
    for (argv, message), error in zip(cases, errors, strict=True):
        assert (message in error) if message else not error, (argv, error)
