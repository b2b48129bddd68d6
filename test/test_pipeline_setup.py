"""`patchset setup` and the source fetch: deb-src derivation, private apt state, pristine files."""
from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path
from typing import Dict, List

import pytest
from conftest import FAKE, META, REPO, TEST, TmpProject

from patchset_lib.common import Project, Runner, base_pin
from patchset_lib import cli, source, test_cmd

DEBIAN_SOURCES = """\
Types: deb
# a comment inside the stanza
URIs: http://mirror.example.invalid/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb deb-src
URIs: http://security.example.invalid/debian-security
Suites: bookworm-security
Components: main

Types: deb
Enabled: no
URIs: http://disabled.example.invalid/debian
Suites: bookworm
Components: main

Types: deb-src
URIs: http://src-only.example.invalid/debian
Suites: bookworm
Components: main
"""


def test_deb822_stanzas_with_deb_become_deb_src() -> None:
    stanzas = source.deb822_to_deb_src(DEBIAN_SOURCES)
    assert len(stanzas) == 2
    assert stanzas[0].splitlines() == [
        "Types: deb-src",
        "# a comment inside the stanza",
        "URIs: http://mirror.example.invalid/debian",
        "Suites: bookworm bookworm-updates",
        "Components: main",
        "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg",
    ]
    assert stanzas[1].splitlines()[:2] == ["Types: deb-src", "URIs: http://security.example.invalid/debian-security"]


def test_one_line_deb_entries_become_deb_src() -> None:
    text = ("# deb http://commented.example.invalid/debian bookworm main\n"
            "deb [arch=amd64 signed-by=/k.gpg] http://one.example.invalid/debian bookworm main contrib\n"
            "deb-src http://already.example.invalid/debian bookworm main\n")
    assert source.one_line_to_deb_src(text) == [
        "deb-src [arch=amd64 signed-by=/k.gpg] http://one.example.invalid/debian bookworm main contrib",
    ]


def test_only_files_apt_reads_are_derived(tmp_path: Path) -> None:
    parts = tmp_path / "sources.list.d"
    parts.mkdir()
    (parts / "debian.sources").write_text(DEBIAN_SOURCES)
    (parts / "extra.list").write_text("deb http://extra.example.invalid/debian bookworm main\n")
    (parts / "old.sources.disabled").write_text(DEBIAN_SOURCES)
    (parts / "old.list.disabled").write_text("deb http://old.example.invalid/debian bookworm main\n")
    (tmp_path / "sources.list").write_text("deb http://main.example.invalid/debian bookworm main\n")

    stanzas, lines = source.derive_deb_src(tmp_path / "sources.list", parts)

    assert len(stanzas) == 2
    assert lines == ["deb-src http://main.example.invalid/debian bookworm main",
                     "deb-src http://extra.example.invalid/debian bookworm main"]


def test_apt_state_is_private_to_the_cache(tmp_path: Path) -> None:
    project = Project(tmp_path)
    options = source.apt_options_in(source.apt_state_dir(project))
    dirs = [o.split("=", 1)[1] for o in options if o.startswith("Dir::")]
    assert {o.split("=", 1)[0] for o in options if o.startswith("Dir::")} == {
        "Dir::Etc::SourceList", "Dir::Etc::SourceParts", "Dir::State::Lists", "Dir::Cache"}
    assert all(Path(d).is_relative_to(project.source_cache) for d in dirs)


def test_tarball_check_refuses_a_wrong_hash(tmp_path: Path) -> None:
    fake = tmp_path / "pytorch_1.13.1+dfsg.orig.tar.xz"
    assert "not downloaded" in source.check_tarball(fake, "0" * 64)
    fake.write_bytes(b"not the tarball")
    error = source.check_tarball(fake, base_pin(Project(REPO))["orig_tarball_sha256"])
    assert error is not None and "expected" in error
    assert source.check_tarball(fake, hashlib.sha256(b"not the tarball").hexdigest()) is None


def test_corrupt_pristine_copy_is_restored_from_a_pristine_checkout(
    tmp_project: TmpProject, base_files: Dict[str, bytes]
) -> None:
    project = Project(tmp_project.root)
    tmp_project.write_tree(project.default_checkout)
    copy = project.pristine / META
    copy.write_bytes(copy.read_bytes() + b"#")
    assert META in (source.check_pristine(project) or "")

    source.ensure_pristine(project, Runner(echo=False))

    assert source.check_pristine(project) is None
    assert copy.read_bytes() == base_files[META]


def test_pristine_comes_from_the_tarball_when_the_checkout_is_patched(
    tmp_project: TmpProject, base_files: Dict[str, bytes]
) -> None:
    project = Project(tmp_project.root)
    # The verified tarball of the real cache (fetched by the tool itself if it is not there).
    real_tarball = source.ensure_tarball(Project(REPO), Runner(log_file=Project(REPO).log_file))
    project.source_cache.mkdir(parents=True)
    os.symlink(real_tarball, source.tarball_path(project))
    tmp_project.write_tree(project.default_checkout, {p: b"# patched\n" for p in base_files})
    for path in (FAKE, META, TEST):
        (project.pristine / path).unlink()

    source.ensure_pristine(project, Runner(echo=False))

    assert source.check_pristine(project) is None
    assert {p: (project.pristine / p).read_bytes() for p in base_files} == base_files


def test_second_setup_is_quiet_and_changes_nothing() -> None:
    # `patchset test` (and so CI) ran setup before these tests: everything must be in place.
    proc = subprocess.run([sys.executable, str(REPO / "build_scripts" / "patchset"), "setup"],
                          cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "setup: everything in place\n"
    assert proc.stderr == ""  # no external command was echoed: nothing was installed or fetched


def test_pytest_collecting_nothing_fails_the_test_command() -> None:
    proc = subprocess.run(
        [sys.executable, str(REPO / "build_scripts" / "patchset"), "-q", "test", "--",
         "-k", "no_test_has_this_name_xyzzy"],
        cwd=REPO, capture_output=True, text=True,
    )
    assert proc.returncode == 1
    assert "collected no tests" in proc.stdout



@pytest.mark.parametrize("argv", [
    ["test", "-k", "foo"],
    ["test", "--", "-k", "foo"],
    ["-q", "test", "-k", "foo"],
])
def test_test_command_hands_trailing_args_to_pytest(argv: List[str]) -> None:
    args = cli.parse_args(cli.build_parser(), argv)
    assert args.func is test_cmd.cmd_test
    project = Project(REPO)
    assert test_cmd.pytest_command(project, args.pytest_args) == [
        project.venv_python, "-m", "pytest", project.tests, "-q", "-p", "no:cacheprovider", "-k", "foo"]


@pytest.mark.parametrize("argv, unknown", [
    (["status", "-k", "foo"], "-k foo"),  # status does not opt in
    (["--bogus", "test"], "--bogus"),  # not after `test`: not pytest's
])
def test_other_unknown_args_are_still_refused(argv: List[str], unknown: str,
                                              capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit) as info:
        cli.parse_args(cli.build_parser(), argv)
    assert info.value.code == 2
    assert f"patchset: error: unrecognized arguments: {unknown}\n" in capsys.readouterr().err


# Appended to overlay_hook.py: `run` then records the install instead of writing into the real .venv.
STUB_INSTALL = '''

def install_project_venv(project, runner):
    with open(Path(project.root) / "calls.log", "a") as log:
        log.write("install\\n")
'''
STUB_UPSTREAM = '''
from pathlib import Path
from patchset_lib.common import sha256_file
def register(subparsers):
    pass
def run_upstream_tests(project, runner, checkout):
    fake = sha256_file(Path(checkout) / "torch/_subclasses/fake_tensor.py")
    with open(Path(project.root) / "calls.log", "a") as log:
        log.write(f"upstream {checkout} {fake}\\n")
    return 3
def node_selections(*args):  # what check imports; run never calls it
    raise NotImplementedError
def run_series_files(*args):
    raise NotImplementedError
'''


def test_run_chains_the_pipeline_and_returns_the_upstream_exit_code(
    tmp_project: TmpProject, good_series: Dict[str, bytes], base_files: Dict[str, bytes]
) -> None:
    lib = tmp_project.root / "build_scripts" / "patchset_lib"
    hook = lib / "overlay_hook.py"
    hook.write_text(hook.read_text() + STUB_INSTALL)
    (lib / "upstream_tests_cmd.py").write_text(STUB_UPSTREAM)
    project = Project(tmp_project.root)
    # Everything setup checks is in place without network: base files as the cached checkout,
    # and the real project venv (made by the setup that ran before these tests).
    tmp_project.write_tree(project.default_checkout)
    os.symlink(REPO / ".venv", project.venv)
    # A patched checkout left by an OLDER series must be reset, not refused.
    tmp_project.write_tree(project.patched_checkout)
    (project.patched_checkout / META).write_bytes(b"# an older series\n")

    proc = tmp_project.tool("run")

    assert proc.returncode == 3, proc.stderr
    assert "reset base files" in proc.stdout and "applied 2 patches" in proc.stdout
    assert (project.root / "calls.log").read_text().splitlines() == [
        "install",
        f"upstream {project.patched_checkout} {hashlib.sha256(good_series[FAKE]).hexdigest()}",
    ]
    assert hashlib.sha256((project.overlay / META).read_bytes()).hexdigest() == \
        hashlib.sha256(good_series[META]).hexdigest()
    assert (project.patched_checkout / TEST).read_bytes() == good_series[TEST]
    # .cache/checkout is never patched by run, and the summary says so
    assert {p: (project.default_checkout / p).read_bytes() for p in base_files} == base_files
    assert f"{project.default_checkout} untouched (pristine v1.13.1)" in proc.stdout


def test_run_says_plainly_when_the_cached_checkout_is_not_pristine(
    tmp_project: TmpProject, good_series: Dict[str, bytes]
) -> None:
    from patchset_lib.run_cmd import cached_checkout_note

    project = Project(tmp_project.root)
    tmp_project.write_tree(project.default_checkout, good_series)  # as `apply` leaves it
    note = cached_checkout_note(project, Runner(echo=False))
    assert note == (f"{project.default_checkout} is NOT pristine (patched: left so by `apply` or an "
                    "older `run`); `./build_scripts/patchset pristine DIR` writes a pristine v1.13.1 tree")


def test_tool_without_a_subcommand_module_fails_naming_it(tmp_project: TmpProject) -> None:
    (tmp_project.root / "build_scripts" / "patchset_lib" / "install_cmd.py").unlink()
    proc = tmp_project.tool("status")
    assert proc.returncode == 1
    assert "patchset_lib/install_cmd.py cannot be imported" in proc.stderr


def test_system_torch_check_names_a_base_file_that_differs(
    tmp_project: TmpProject, base_files: Dict[str, bytes]
) -> None:
    from patchset_lib.setup_cmd import check_system_torch

    project = Project(tmp_project.root)
    assert check_system_torch(project, Runner(echo=False)) is None  # the real Debian torch
    fake_torch = tmp_project.root / "fake-torch"
    tmp_project.write_tree(fake_torch, {p[len("torch/"):]: d for p, d in base_files.items() if p.startswith("torch/")})
    (fake_torch / "_subclasses" / "meta_utils.py").write_bytes(base_files[META] + b"\n")
    pin = project.base_pin_file.read_text().replace("/usr/lib/python3/dist-packages/torch", str(fake_torch))
    project.base_pin_file.write_text(pin)

    error = check_system_torch(project, Runner(echo=False))

    assert error is not None and str(fake_torch / "_subclasses" / "meta_utils.py") in error


def test_setup_wants_torchvision_for_the_model_benchmarks(monkeypatch: pytest.MonkeyPatch) -> None:
    from patchset_lib import apt, setup_cmd

    present = {name for group in setup_cmd.APT_PACKAGES for name in group} - {"python3-torchvision"}
    monkeypatch.setattr(apt, "dpkg_versions",
                        lambda runner, names: {name: "1" for name in names if name in present})
    assert apt.missing_apt_packages(Runner(echo=False), setup_cmd.APT_PACKAGES) == ["python3-torchvision"]
