"""Venvs of pinned PyPI packages made from a given interpreter (the lint venv, the pip-torch venv).

Idempotent: a venv whose packages already have the pinned versions is left alone; pip's own
cache is used as is, so a second machine setup downloads nothing it already has.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Sequence

from .common import PatchsetError, Runner, quiet

VERSIONS_SCRIPT = (
    "import json, sys\n"
    "try:\n"
    "    from importlib import metadata as m\n"
    "except ImportError:\n"  # Python 3.7
    "    import pkg_resources\n"
    "    def v(n):\n"
    "        try: return pkg_resources.get_distribution(n).version\n"
    "        except Exception: return None\n"
    "else:\n"
    "    def v(n):\n"
    "        try: return m.version(n)\n"
    "        except m.PackageNotFoundError: return None\n"
    "print(json.dumps({n: v(n) for n in sys.argv[1:]}))\n"
)


def venv_python(venv: Path) -> Path:
    return venv / "bin" / "python"


def installed_versions(runner: Runner, python: Path, names: Sequence[str]) -> Dict[str, Optional[str]]:
    """Version of each distribution as `python` sees it (None if absent)."""
    proc = quiet(runner).run([python, "-I", "-c", VERSIONS_SCRIPT, *names], capture=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def wrong_pins(runner: Runner, python: Path, pins: Mapping[str, str]) -> List[str]:
    """`name==version` of every pin the interpreter does not have at that exact version."""
    have = installed_versions(runner, python, list(pins))
    return [f"{name}=={want}" for name, want in pins.items()
            if (have.get(name) or "").split("+")[0] != want]


def check_is_venv(venv: Path) -> Optional[str]:
    """None when `venv` is absent or a venv; a directory that is not one is never written into."""
    if venv.exists() and not (venv / "pyvenv.cfg").is_file():
        return f"{venv} exists and is not a venv; remove it first"
    return None


def ensure_pinned_venv(runner: Runner, base_python: Path, venv: Path, pins: Mapping[str, str],
                       label: str, pip_args: Sequence[str] = ()) -> List[str]:
    """Make `venv` from `base_python` with `pins` installed (`pip install` given `pip_args`
    too); returns what was done."""
    error = check_is_venv(venv)
    if error:
        raise PatchsetError(error)
    actions: List[str] = []
    if not venv_python(venv).exists():
        print(f"{label}: creating {venv} from {base_python}", flush=True)
        runner.run([base_python, "-m", "venv", venv])
        actions.append("venv")
    wrong = wrong_pins(runner, venv_python(venv), pins)
    if wrong:
        print(f"{label}: installing {' '.join(wrong)} into {venv}", flush=True)
        runner.run([venv_python(venv), "-m", "pip", "install", "--disable-pip-version-check",
                    "--no-input", *pip_args, *wrong])
        still = wrong_pins(runner, venv_python(venv), pins)
        if still:
            raise PatchsetError(f"pip did not install the pinned {', '.join(still)} into {venv}")
        actions.append("pip")
    return actions
