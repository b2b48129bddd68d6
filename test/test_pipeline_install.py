"""Tests of `patchset install` / `uninstall` on throwaway venvs, overlays and projects in tmp_path.

The project .venv case uses a real `--system-site-packages` venv of /usr/bin/python3.11 (so
`import torch` is Debian's system torch). Install/uninstall on PyPI's real torch 1.13.1
(byte-exact restore, refusal of a changed base file) is tested in test_pipeline_pip.py; the
cases here need what the real venv cannot give, a torch of another version or a throwaway
overlay, so they use a FAKE pip-style venv whose site-packages holds a torch/ skeleton with
copies of the pristine _subclasses files.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Dict, Tuple

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "build_scripts"))

from patchset_lib import overlay, overlay_hook, pip_torch, torch_target  # noqa: E402
from patchset_lib.common import PatchsetError, Project, Runner, sha256_bytes, sha256_file  # noqa: E402

SYSTEM_PYTHON = Path("/usr/bin/python3.11")
SYSTEM_TORCH = Path("/usr/lib/python3/dist-packages/torch")
SYSTEM_SUBCLASSES = SYSTEM_TORCH / "_subclasses"
OVERLAID = ("torch/_subclasses/fake_tensor.py", "torch/_subclasses/meta_utils.py",
            "torch/fx/experimental/proxy_tensor.py")
# Appended to the throwaway overlay's copies, so "overlay loaded" is observable and hashes differ.
MARKER = b"\nPATCHSET_TEST_OVERLAY = True  # throwaway overlay made by the tests\n"

pytestmark = pytest.mark.skipif(
    not (SYSTEM_PYTHON.exists() and SYSTEM_SUBCLASSES.is_dir()),
    reason="needs /usr/bin/python3.11 with Debian's python3-torch",
)


def snapshot(root: Path) -> Dict[str, str]:
    """Relative path -> sha256 and mode (files), link target (symlinks), 'dir'; never follows links."""
    found: Dict[str, str] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            rel = str(path.relative_to(root))
            if path.is_symlink():
                found[rel] = "link:" + os.readlink(path)
            elif path.is_dir():
                found[rel] = "dir"
            else:
                found[rel] = f"{sha256_file(path)} {oct(path.stat().st_mode)}"
    return found


def make_project(root: Path, overlaid: Tuple[str, ...] = OVERLAID) -> Project:
    """A project copy: patches/, the tool's own files, and a throwaway overlay of marked copies."""
    shutil.copytree(REPO / "patches", root / "patches")
    shutil.copytree(REPO / "build_scripts", root / "build_scripts",
                    ignore=shutil.ignore_patterns("__pycache__"))
    lines = []
    for path in overlaid:
        base = (SYSTEM_TORCH.parent / path).read_bytes()
        target = root / "torch_overlay" / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(base + MARKER)
        lines.append(f"{path} {sha256_bytes(base)} {sha256_bytes(base + MARKER)}\n")
    (root / "torch_overlay" / "MANIFEST").write_text("".join(lines))
    return Project(root)


def make_venv(where: Path, system_site_packages: bool) -> Path:
    argv = [str(SYSTEM_PYTHON), "-m", "venv", "--without-pip", str(where)]
    if system_site_packages:
        argv.insert(3, "--system-site-packages")
    subprocess.run(argv, check=True)
    return where / "bin" / "python"


def make_pip_venv(where: Path, version: str = "1.13.1") -> Path:
    """A venv without system site-packages whose site-packages has a pip-style torch skeleton."""
    python = make_venv(where, system_site_packages=False)
    site = where / "lib" / "python3.11" / "site-packages"
    subclasses = site / "torch" / "_subclasses"
    subclasses.mkdir(parents=True)
    (site / "torch" / "__init__.py").write_text("# fake pip torch for the patchset tests\n")
    (site / "torch" / "version.py").write_text(f"__version__ = '{version}'\ndebug = False\n")
    for source in sorted(SYSTEM_SUBCLASSES.glob("*.py")):
        shutil.copy2(source, subclasses / source.name)
    for path in OVERLAID:  # the overlaid modules outside _subclasses
        (site / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(SYSTEM_TORCH.parent / path, site / path)
    dist_info = site / f"torch-{version}.dist-info"
    dist_info.mkdir()
    (dist_info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: torch\nVersion: {version}\n")
    return python


def site_packages(venv: Path) -> Path:
    return venv / "lib" / "python3.11" / "site-packages"


def loaded_file(python: Path, overlay_on: bool) -> str:
    env = dict(os.environ, PATCHSET_OVERLAY="1" if overlay_on else "0", PYTHONDONTWRITEBYTECODE="1")
    proc = subprocess.run(
        [str(python), "-c", "import torch._subclasses.fake_tensor as m; print(m.__file__)"],
        env=env, capture_output=True, text=True, check=True, cwd="/",
    )
    return os.path.realpath(proc.stdout.strip())


@pytest.fixture
def runner() -> Runner:
    return Runner(log_file=None, echo=False)


@pytest.fixture
def project(tmp_path: Path) -> Project:
    return make_project(tmp_path / "repo")


# --- project .venv: the import hook ---------------------------------------------------------

def test_project_venv_install_loads_overlay_and_writes_only_two_files(project: Project, runner: Runner) -> None:
    make_venv(project.venv, system_site_packages=True)
    system_before = snapshot(SYSTEM_SUBCLASSES)
    system_hashes = {p: sha256_file(SYSTEM_TORCH.parent / p) for p in OVERLAID}
    project_before = snapshot(project.root)

    overlay_hook.install_project_venv(project, runner)

    assert snapshot(SYSTEM_SUBCLASSES) == system_before
    assert {p: sha256_file(SYSTEM_TORCH.parent / p) for p in OVERLAID} == system_hashes
    after = snapshot(project.root)
    added = set(after) - set(project_before)
    site_rel = site_packages(project.venv).relative_to(project.root)
    assert added == {str(site_rel / "patchset_overlay.py"), str(site_rel / "patchset_overlay.pth")}
    assert {k: v for k, v in after.items() if k not in added} == project_before

    site = site_packages(project.venv)
    assert (site / "patchset_overlay.pth").read_text() == "import patchset_overlay\n"
    hook = (site / "patchset_overlay.py").read_text()
    assert f"OVERLAY_ROOT = {str(project.overlay.resolve())!r}" in hook
    assert ("MODULES = ('torch._subclasses.fake_tensor', 'torch._subclasses.meta_utils', "
            "'torch.fx.experimental.proxy_tensor')") in hook

    assert loaded_file(project.venv_python, overlay_on=True) == str(
        (project.overlay / "torch/_subclasses/fake_tensor.py").resolve())
    assert loaded_file(project.venv_python, overlay_on=False) == str(SYSTEM_SUBCLASSES / "fake_tensor.py")
    assert snapshot(SYSTEM_SUBCLASSES) == system_before


def test_hook_overlays_a_package_and_keeps_its_other_submodules_installed(tmp_path: Path, runner: Runner) -> None:
    project = make_project(tmp_path / "repo", OVERLAID + ("torch/_refs/__init__.py",))
    make_venv(project.venv, system_site_packages=True)
    overlay_hook.install_project_venv(project, runner)
    script = ("import torch._refs as r, torch._refs.nn.functional as f\n"
              "print(r.__file__); print(f.__file__); print(getattr(r, 'PATCHSET_TEST_OVERLAY', False))")
    seen = {}
    for overlay in ("1", "0"):
        env = dict(os.environ, PATCHSET_OVERLAY=overlay, PYTHONDONTWRITEBYTECODE="1")
        proc = subprocess.run([str(project.venv_python), "-c", script], env=env, capture_output=True,
                              text=True, cwd="/")
        assert proc.returncode == 0, proc.stderr
        seen[overlay] = proc.stdout.split()
    functional = str(SYSTEM_TORCH / "_refs" / "nn" / "functional" / "__init__.py")
    assert seen["1"] == [str((project.overlay / "torch/_refs/__init__.py").resolve()), functional, "True"]
    assert seen["0"] == [str(SYSTEM_TORCH / "_refs" / "__init__.py"), functional, "False"]


def test_project_venv_install_twice_is_noop_and_uninstall_restores(
    project: Project, runner: Runner, capsys: pytest.CaptureFixture
) -> None:
    make_venv(project.venv, system_site_packages=True)
    venv_before = snapshot(project.venv)
    overlay_hook.install_project_venv(project, runner)
    venv_installed = snapshot(project.venv)
    capsys.readouterr()

    overlay_hook.install_project_venv(project, runner)
    assert "already installed" in capsys.readouterr().out
    assert snapshot(project.venv) == venv_installed

    overlay_hook.uninstall_project_venv(project, runner)
    assert snapshot(project.venv) == venv_before
    assert loaded_file(project.venv_python, overlay_on=True) == str(SYSTEM_SUBCLASSES / "fake_tensor.py")
    capsys.readouterr()
    overlay_hook.uninstall_project_venv(project, runner)
    assert "nothing to uninstall" in capsys.readouterr().out


def test_project_venv_missing_asks_for_setup(project: Project, runner: Runner) -> None:
    with pytest.raises(PatchsetError, match="patchset setup first"):
        overlay_hook.install_project_venv(project, runner)
    assert not project.venv.exists()


@pytest.mark.parametrize("damage", ["missing", "edited"])
def test_stale_overlay_asks_for_overlay_and_writes_nothing(project: Project, runner: Runner, damage: str) -> None:
    make_venv(project.venv, system_site_packages=True)
    target = project.overlay / OVERLAID[0]
    if damage == "missing":
        target.unlink()
    else:
        target.write_bytes(target.read_bytes() + b"# edited by hand\n")
    before = snapshot(project.root)
    with pytest.raises(PatchsetError, match="overlay first"):
        overlay_hook.install_project_venv(project, runner)
    assert snapshot(project.root) == before


def test_missing_manifest_asks_for_overlay(project: Project, runner: Runner) -> None:
    make_venv(project.venv, system_site_packages=True)
    project.overlay_manifest.unlink()
    before = snapshot(project.root)
    with pytest.raises(PatchsetError, match="overlay first"):
        overlay_hook.install_project_venv(project, runner)
    assert snapshot(project.root) == before


# --- a user's pip-style venv: replace files with a backup --------------------------------

def test_pip_venv_reinstall_after_overlay_update_then_uninstall(
    tmp_path: Path, project: Project, runner: Runner, capsys: pytest.CaptureFixture
) -> None:
    python = make_pip_venv(tmp_path / "user-venv")
    site = site_packages(tmp_path / "user-venv")
    pristine = snapshot(site)
    pip_torch.install_into_python(project, runner, python)
    # The lead regenerates the overlay (a new patch): MANIFEST and file change together.
    changed = project.overlay / OVERLAID[0]
    changed.write_bytes(changed.read_bytes() + b"# second version\n")
    manifest = project.overlay_manifest.read_text().splitlines()
    path, base, _ = manifest[0].split()
    manifest[0] = f"{path} {base} {sha256_file(changed)}"
    project.overlay_manifest.write_text("\n".join(manifest) + "\n")
    capsys.readouterr()

    pip_torch.install_into_python(project, runner, python)
    assert "updated the overlay" in capsys.readouterr().out
    assert sha256_file(site / OVERLAID[0]) == sha256_file(changed)
    pip_torch.uninstall_from_python(project, runner, python)
    assert snapshot(site) == pristine


def test_pip_venv_uninstall_refuses_files_changed_after_install(
    tmp_path: Path, project: Project, runner: Runner
) -> None:
    python = make_pip_venv(tmp_path / "user-venv")
    site = site_packages(tmp_path / "user-venv")
    pip_torch.install_into_python(project, runner, python)
    edited = site / OVERLAID[1]
    edited.write_bytes(edited.read_bytes() + b"# user edit\n")
    before = (snapshot(site), snapshot(project.cache))
    with pytest.raises(PatchsetError, match="changed since patchset installed it"):
        pip_torch.uninstall_from_python(project, runner, python)
    assert (snapshot(site), snapshot(project.cache)) == before


def test_refuses_torch_that_is_not_1_13_1(tmp_path: Path, project: Project, runner: Runner) -> None:
    python = make_pip_venv(tmp_path / "user-venv", version="2.0.0")
    before = snapshot(tmp_path / "user-venv")
    with pytest.raises(PatchsetError, match=r"version 2\.0\.0, not 1\.13\.1"):
        pip_torch.install_into_python(project, runner, python)
    assert snapshot(tmp_path / "user-venv") == before
    assert not project.cache.exists()


def test_refuses_system_python(project: Project, runner: Runner) -> None:
    before = snapshot(SYSTEM_SUBCLASSES)
    with pytest.raises(PatchsetError, match="system"):
        pip_torch.install_into_python(project, runner, SYSTEM_PYTHON)
    assert snapshot(SYSTEM_SUBCLASSES) == before
    assert not project.cache.exists()


def test_refuses_venv_whose_torch_is_the_system_package(tmp_path: Path, project: Project, runner: Runner) -> None:
    python = make_venv(tmp_path / "sys-venv", system_site_packages=True)
    before = snapshot(SYSTEM_SUBCLASSES)
    with pytest.raises(PatchsetError, match="system package"):
        pip_torch.install_into_python(project, runner, python)
    assert snapshot(SYSTEM_SUBCLASSES) == before
    assert not project.cache.exists()


def test_cli_reports_refusal_with_exit_1(project: Project) -> None:
    proc = subprocess.run(
        [sys.executable, str(project.root / "build_scripts" / "patchset"), "-q", "install",
         "--python", str(SYSTEM_PYTHON)],
        capture_output=True, text=True,
    )
    assert proc.returncode == 1
    assert "patchset install: error:" in proc.stderr and "system interpreter" in proc.stderr
    assert not project.cache.exists() or not (project.cache / "backups").exists()


# --- the checks themselves ------------------------------------------------------------------

def torch_info(torch_dir: Path, version_py: str, dist_version: str) -> torch_target.TorchInfo:
    return torch_target.TorchInfo(
        python=Path("/venv/bin/python"), executable="/venv/bin/python", prefix="/venv",
        base_prefix="/usr", purelib=Path("/venv/lib/python3.11/site-packages"),
        torch_dir=torch_dir, version_py=version_py, dist_version=dist_version,
    )


def test_debian_torch_is_accepted_only_through_dpkg_version() -> None:
    debian = torch_info(SYSTEM_TORCH, "1.13.0a0", "1.13.0a0+gitunknown")
    assert torch_target.check_torch_version(debian, SYSTEM_TORCH, "1.13.1+dfsg-4") is None
    assert "not 1.13.1" in torch_target.check_torch_version(debian, SYSTEM_TORCH, "1.13.0+dfsg-1")
    assert "not 1.13.1" in torch_target.check_torch_version(debian, SYSTEM_TORCH, None)
    elsewhere = torch_info(Path("/venv/lib/python3.11/site-packages/torch"), "1.13.0a0", None)
    assert "not 1.13.1" in torch_target.check_torch_version(elsewhere, SYSTEM_TORCH, "1.13.1+dfsg-4")


def test_pip_versions() -> None:
    site_torch = Path("/venv/lib/python3.11/site-packages/torch")
    assert torch_target.check_torch_version(torch_info(site_torch, "1.13.1", "1.13.1"), SYSTEM_TORCH, None) is None
    assert torch_target.check_torch_version(torch_info(site_torch, "1.13.1+cpu", "1.13.1+cpu"),
                                           SYSTEM_TORCH, None) is None
    assert torch_target.check_torch_version(torch_info(site_torch, "1.13.1", "2.0.0"), SYSTEM_TORCH, None)
    assert torch_target.check_torch_version(torch_info(site_torch, "1.13.10", None), SYSTEM_TORCH, None)


def test_manifest_parsing_matches_overlay_format() -> None:
    a, b = "a" * 64, "b" * 64
    entries = overlay.parse_manifest(f"torch/_subclasses/fake_tensor.py {a} {b}\n\n")
    assert entries == [overlay.ManifestEntry("torch/_subclasses/fake_tensor.py", a, b)]
    assert entries[0].module == "torch._subclasses.fake_tensor"
    package = overlay.parse_manifest(f"torch/_refs/__init__.py {a} {b}\n")
    assert package[0].module == "torch._refs"
    for bad in (f"{a}  torch/x.py\n", f"torch/__init__.py {a} {b}\n", f"test/test_x.py {a} {b}\n", ""):
        with pytest.raises(PatchsetError):
            overlay.parse_manifest(bad)
