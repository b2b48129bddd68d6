"""The project .venv: made by setup from the system python with --system-site-packages (Debian's
torch is built for it), with the pinned test tools.
"""
from __future__ import annotations

from pathlib import Path
from typing import Dict, List, Optional

from .common import PatchsetError, Project, Runner, base_pin
from .venvs import installed_versions as installed_versions_in

PINNED_PIP: Dict[str, str] = {"pytest": "9.2.0", "expecttest": "0.3.0"}


def check_project_venv(project: Project) -> Optional[str]:
    if not project.venv_python.exists():
        return f"no project venv at {project.venv}: run ./build_scripts/patchset setup first"
    return None


def read_pyvenv_cfg(venv: Path) -> Dict[str, str]:
    cfg: Dict[str, str] = {}
    for line in (venv / "pyvenv.cfg").read_text().splitlines():
        if "=" in line:
            key, value = line.split("=", 1)
            cfg[key.strip()] = value.strip()
    return cfg


def check_venv_kind(project: Project) -> Optional[str]:
    """None when .venv is a --system-site-packages venv of the system python (or absent)."""
    venv = project.venv
    if not venv.exists():
        return None
    system_python = Path(base_pin(project)["system_python"])
    if not (venv / "pyvenv.cfg").is_file() or not project.venv_python.exists():
        return f"{venv} is not a venv; remove it and run setup again"
    cfg = read_pyvenv_cfg(venv)
    if cfg.get("include-system-site-packages", "").lower() != "true" or \
            Path(cfg.get("home", "")) != system_python.parent or \
            not cfg.get("version", "").startswith("3.11"):
        return (f"{venv} was not made by `{system_python} -m venv --system-site-packages`; "
                "remove it and run setup again")
    return None


def venv_versions(project: Project, runner: Runner) -> Dict[str, Optional[str]]:
    """Installed version of each pinned package as the venv python sees it (None if absent)."""
    return installed_versions_in(runner, project.venv_python, list(PINNED_PIP))


def ensure_venv(project: Project, runner: Runner) -> List[str]:
    error = check_venv_kind(project)
    if error:
        raise PatchsetError(error)
    actions: List[str] = []
    if not project.venv.exists():
        system_python = base_pin(project)["system_python"]
        print(f"setup: creating {project.venv} from {system_python}", flush=True)
        runner.run([system_python, "-m", "venv", "--system-site-packages", project.venv])
        actions.append("venv")
    versions = venv_versions(project, runner)
    wrong = [f"{name}=={want}" for name, want in PINNED_PIP.items() if versions.get(name) != want]
    if wrong:
        print(f"setup: installing {' '.join(wrong)} into .venv", flush=True)
        runner.run([project.venv_python, "-m", "pip", "install", "--disable-pip-version-check",
                    "--no-input", *wrong])
        versions = venv_versions(project, runner)
        still = [name for name, want in PINNED_PIP.items() if versions.get(name) != want]
        if still:
            raise PatchsetError(f"pip did not install the pinned {', '.join(still)}")
        actions.append("pip")
    return actions
