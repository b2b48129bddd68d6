"""The README a packager reads: short (a ten-minute read), its stack table follows patches/stacks.json, every `patchset`
command line in it parses, and its three recipes run as written.

Each recipe is a ```sh block after a `<!-- recipe: NAME -->` line. It runs under `bash -eu`, with
git knowing nobody (no config, no identity variables: as on a fresh build box or CI's root), with
only the lines that name the packager's own directories (`PYTORCH=`, `OUT=`, `PKG=`) replaced by
directories the test makes: a git repo of the v1.13.1 base files and upstream's test/, and a
package tree whose debian/patches holds a patch of its own. The `pr` and `debian` recipes run in
a fresh clone of this project (nothing run before them, no author set); the `edit` recipe, which
rewrites patches/, runs in a copy of the project that shares this one's .venv, without its
`setup && overlay && install` line (that line is what `patchset test` did before these tests
ran; it is checked to be in the block verbatim).
"""
from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Mapping, Tuple

import pytest
from conftest import (DEBIAN_OWN_PATCH, DEBIAN_SERIES, REPO, TOOL_LIB, fresh_clone, git, package_tree,
                      pristine_checkout, series_copy, sha, tree_hashes)

from patchset_lib import cli, refresh_cmd
from patchset_lib.common import ABSENT, Project, base_pin, find_project, read_base_hashes

README = REPO / "README.md"
MAX_LINES = 200
MAX_WORDS = 1200
TWO_COMMANDS = ("./build_scripts/patchset run", "./build_scripts/patchset test")
OWN_DIRS = ("PYTORCH", "OUT", "PKG")
PREREQUISITES = "./build_scripts/patchset setup"
NAME, EMAIL = "Your Name", "you@example.org"
IDENTITY = json.loads((REPO / "patches" / "identity.json").read_text())
AUTHOR_OF_RECORD = f"{IDENTITY['name']} <{IDENTITY['email']}>"  # no author is set in a fresh clone
EDIT_MARK = "  # the edit recipe's change"
EDITED = "torch/_subclasses/fake_tensor.py"


def readme() -> str:
    return README.read_text()


def sh_blocks(text: str) -> List[str]:
    return re.findall(r"^```sh\n(.*?)^```$", text, flags=re.M | re.S)


def recipe(name: str) -> str:
    match = re.search(rf"^<!-- recipe: {name} -->\n```sh\n(.*?)^```$", readme(), flags=re.M | re.S)
    assert match, f"README has no recipe {name}"
    return match.group(1)


def command_lines(block: str) -> List[List[str]]:
    """Each `./build_scripts/patchset ...` command of a shell block, as argv after the program."""
    commands = []
    for line in block.splitlines():
        for part in re.split(r"&&|;|\|", line):
            words = shlex.split(part, comments=True)
            while words and re.fullmatch(r"\w+=.*", words[0]):
                words = words[1:]
            if words and words[0] == "./build_scripts/patchset":
                commands.append(words[1:])
    return commands


def no_identity_env(home: Path, **extra: str) -> Dict[str, str]:
    home.mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("GIT_AUTHOR_", "GIT_COMMITTER_")) and k not in ("EMAIL", "XDG_CONFIG_HOME")}
    return {**env, "HOME": str(home), "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1",
            **extra}


def run_recipe(block: str, cwd: Path, env: Mapping[str, str], drop: str = "") -> subprocess.CompletedProcess:
    lines = [line for line in block.splitlines()
             if not re.match(rf"({'|'.join(OWN_DIRS)})=", line) and line != drop]
    proc = subprocess.run(["bash", "-euo", "pipefail", "-c", "\n".join(lines)], cwd=cwd, env=dict(env),
                          capture_output=True, text=True)
    assert proc.returncode == 0, f"{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    return proc


# ---- shape -------------------------------------------------------------------------------------


def test_readme_is_short_and_starts_with_the_two_commands() -> None:
    text = readme()
    assert len(text.splitlines()) <= MAX_LINES
    first = sh_blocks(text)[0]
    assert text.startswith("```sh\n")
    assert [line.split("#")[0].strip() for line in first.splitlines()] == list(TWO_COMMANDS)


def test_readme_says_how_long_the_full_test_takes_and_names_the_quick_one() -> None:
    after = readme().split("```\n", 1)[1].splitlines()[0]  # the line after the two commands
    assert "50 minutes on 2 cores" in after and "`./build_scripts/patchset test --quick`" in after
    assert cli.parse_args(cli.build_parser(), ["test", "--quick"]).quick


def test_readme_is_a_ten_minute_read() -> None:
    assert len(readme().split()) <= MAX_WORDS


def test_stack_table_has_one_row_per_stack_in_series_order() -> None:
    table = readme().split("| stack | fixes |", 1)[1].split("\n\n", 1)[0]
    rows = [line.split("|")[1].strip() for line in table.splitlines()[2:]]
    stacks = json.loads((REPO / "patches" / "stacks.json").read_text())["stacks"]
    assert rows == [stack["name"] for stack in stacks]


def test_patch_table_in_docs_has_one_row_per_patch_in_series_order() -> None:
    text = (REPO / "docs" / "patches.md").read_text()
    rows = re.findall(r"^\| `(\d{4}-[^`]*)` \|", text, flags=re.M)
    series = (REPO / "patches" / "series").read_text().split()
    assert rows == [name[: -len(".patch")] for name in series]


def test_every_patchset_command_in_the_readme_parses() -> None:
    parser = cli.build_parser()
    commands = [argv for block in sh_blocks(readme()) for argv in command_lines(block)]
    assert len(commands) >= 10
    for argv in commands:
        try:
            args = cli.parse_args(parser, argv)
        except SystemExit:
            pytest.fail(f"README: `patchset {shlex.join(argv)}` does not parse")
        assert callable(args.func)


def test_recipes_name_every_prerequisite() -> None:
    assert PREREQUISITES in recipe("edit").splitlines()
    for name in ("pr", "debian"):  # the edit recipe commits nothing of the packager's
        assert recipe(name).startswith(f'NAME="{NAME}" EMAIL={EMAIL}\n')
    for name in ("pr", "edit"):  # the v1.13.1 checkout, and how to get one offline
        line = next(line for line in recipe(name).splitlines() if line.startswith("PYTORCH="))
        assert "git checkout of tag v1.13.1" in line and "patchset pristine --git DIR" in line, line
    assert callable(cli.parse_args(cli.build_parser(), ["pristine", "--git", "DIR"]).func)


def test_readme_names_every_test_file_the_series_extends() -> None:
    sentence = readme().split("Each patch brings its tests in the test file", 1)[1].split("\n\n", 1)[0]
    touched = {m for p in (REPO / "patches").glob("[0-9]*.patch")
               for m in re.findall(r"^diff --git a/(test/\S+) ", p.read_text(), flags=re.M)}
    assert touched and set(re.findall(r"`(test/[^`]+)`", sentence)) == touched


def test_readme_states_the_license_of_the_files_the_series_changes() -> None:
    license_text = (find_project(TOOL_LIB).default_checkout / "LICENSE").read_text()
    assert re.search(r"^3\. Neither the names of", license_text, flags=re.M)  # BSD-3-Clause: three
    assert not re.search(r"^4\. ", license_text, flags=re.M)
    line = next(line for line in readme().splitlines() if line.startswith("**License:**"))
    assert "PyTorch's own, BSD-3-Clause" in line and "debian/copyright" in line


def test_debian_recipe_says_apt_get_source_needs_deb_src() -> None:
    line = next(line for line in recipe("debian").splitlines() if line.startswith("PKG="))
    assert "apt-get source pytorch=1.13.1+dfsg-4" in line and "deb-src" in line, line


# ---- the recipes, run ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def base_tree(tmp_path_factory: pytest.TempPathFactory) -> Dict[str, bytes]:
    project = find_project(TOOL_LIB)
    return {path: (project.pristine / path).read_bytes()
            for path, digest in read_base_hashes(project).items() if digest != ABSENT}


def v1131_checkout(root: Path) -> Path:
    """A clean git checkout standing for tag v1.13.1: upstream's test/ and the base files."""
    pristine_checkout(root)
    git("init", "-q", cwd=root)
    git("add", "-A", cwd=root)
    git("commit", "-q", "-m", "v1.13.1", cwd=root)
    return root


def applied_bytes(tmp_path: Path, base: Mapping[str, bytes]) -> Dict[str, bytes]:
    """The base files after the series, as `patchset apply` makes them."""
    tree = tmp_path / "applied"
    for path, data in base.items():
        (tree / path).parent.mkdir(parents=True, exist_ok=True)
        (tree / path).write_bytes(data)
    proc = subprocess.run([str(REPO / "build_scripts" / "patchset"), "-q", "apply", "--checkout", str(tree)],
                          cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return {path: (tree / path).read_bytes() for path in read_base_hashes(find_project(TOOL_LIB))
            if (tree / path).is_file()}


def test_pr_recipe(tmp_path: Path, base_tree: Dict[str, bytes]) -> None:
    project = fresh_clone(tmp_path / "project")
    checkout = v1131_checkout(tmp_path / "pytorch")
    env = no_identity_env(tmp_path / "home", PYTORCH=str(checkout), OUT=str(tmp_path / "out"))
    run_recipe(recipe("pr"), project, env)
    expected = applied_bytes(tmp_path, base_tree)
    assert {p: (checkout / p).read_bytes() for p in expected} == expected
    log = subprocess.run(["git", "log", "--format=%an <%ae>|%cn <%ce>|%(trailers:only,unfold)", "HEAD~1..HEAD"],
                         cwd=checkout, env=env, capture_output=True, text=True, check=True).stdout
    # the series' author of record, never the packager, who signs off and commits
    assert log.strip().split("|") == [AUTHOR_OF_RECORD, f"{NAME} <{EMAIL}>", f"Signed-off-by: {NAME} <{EMAIL}>"]
    count = subprocess.run(["git", "rev-list", "--count", "HEAD"], cwd=checkout, env=env,
                           capture_output=True, text=True, check=True).stdout
    assert int(count) == 1 + len((REPO / "patches" / "series").read_text().split())
    cover = (tmp_path / "out" / "0000-cover-letter.patch").read_text()
    assert cover.endswith("base-commit: 49444c3e546bf240bed24a101e747422d1f8a0ee\n")


def readme_dep3_fields() -> List[str]:
    """The DEP-3 fields the README says every exported patch has (before its `; Bug only ...`)."""
    match = re.search(r"DEP-3\s+headers: ([^;.]*)", readme())
    assert match, "README names no DEP-3 headers"
    return [field.strip() for field in match.group(1).split(",")]


def test_debian_recipe(tmp_path: Path, base_tree: Dict[str, bytes]) -> None:
    pkg = package_tree(tmp_path / "pytorch-1.13.1+dfsg", base_tree)
    orig = tree_hashes(pkg)
    project = fresh_clone(tmp_path / "project")
    env = no_identity_env(tmp_path / "home", PKG=str(pkg))
    proc = run_recipe(recipe("debian"), project, env)
    series = (REPO / "patches" / "series").read_text().split()
    assert (pkg / "debian/patches/series").read_text() == DEBIAN_SERIES + "".join(
        f"fake-tensor/{name}\n" for name in series)
    assert f"Now at patch debian/patches/fake-tensor/{series[-1]}" in proc.stdout  # all, ours last
    after = {p: h for p, h in tree_hashes(pkg).items() if not p.startswith((".pc/", "debian/"))}
    assert after == {p: h for p, h in orig.items() if not p.startswith("debian/")}  # popped
    fields = set()
    for name in series:
        text = (pkg / "debian/patches/fake-tensor" / name).read_text()
        header = text.split("\n---\n")[0]
        fields |= {line.split(":", 1)[0] for line in header.splitlines() if not line.startswith(" ")}
        assert f"\nAuthor: {AUTHOR_OF_RECORD}\n" in header
        assert f" Signed-off-by: {NAME} <{EMAIL}>\n" in header
    # what the README lists is what the export writes; Bug only for a patch with a filed bug
    status = json.loads((REPO / "patches/upstream-status.json").read_text())
    bugs = any(entry.get("bug") for entry in status.values())
    assert fields == {*readme_dep3_fields(), *(["Bug"] if bugs else [])}
    assert "Bug only where a patch fixes a filed bug" in " ".join(readme().split())
    again = run_recipe("\n".join(recipe("debian").splitlines()[:3]), project, env)
    assert "already in place" in again.stdout
    assert sha((pkg / "debian/patches/0001-debian-setup.patch").read_bytes()) == sha(DEBIAN_OWN_PATCH)


def project_venv(venv: Path) -> Path:
    """A venv of the system python (as setup makes .venv) that borrows this project's pytest and
    expecttest, so the copy's own overlay and hook can be installed without pip."""
    system_python = base_pin(find_project(TOOL_LIB))["system_python"]
    subprocess.run([system_python, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)],
                   check=True)
    borrowed = next((REPO / ".venv").glob("lib/python3.11/site-packages"))
    next(venv.glob("lib/python3.11/site-packages")).joinpath("borrowed_pytest.pth").write_text(f"{borrowed}\n")
    return venv


def project_copy(root: Path) -> Path:
    """series_copy with a venv of its own, no torch_overlay/ but its MANIFEST and no hook:
    refresh and overlay write only the copy, and `upstream-tests --checkout` must make the
    overlay and install the hook itself. Upstream's unmodified test files are this project's
    cached checkout's, which `setup` extracted (only read)."""
    series_copy(root)
    checkout = Project(root).default_checkout
    checkout.parent.mkdir(parents=True, exist_ok=True)
    os.symlink(find_project(TOOL_LIB).default_checkout, checkout)
    (root / "torch_overlay").mkdir()
    shutil.copyfile(REPO / "torch_overlay/MANIFEST", root / "torch_overlay/MANIFEST")
    project_venv(root / ".venv")
    return root


def file_diffs(path: str) -> List[Tuple[str, List[str]]]:
    """(patch name, lines of its diff of path) for each patch of the series that changes path."""
    diffs = []
    for name in (REPO / "patches" / "series").read_text().split():
        text = (REPO / "patches" / name).read_text()
        match = re.search(rf"^diff --git a/{re.escape(path)} b/.*?(?=^diff --git |\Z)", text, flags=re.M | re.S)
        if match:
            diffs.append((name, match.group(0).splitlines()))
    return diffs


def line_of_an_earlier_patch(path: str, final: str) -> Tuple[str, str]:
    """(patch, line): a `def ...:` line that patch adds in the middle of lines it adds, which no
    later patch changes, each once in the final file, and not by the last patch changing path
    (`git log -1 -- path` would name that one)."""
    diffs, lines = file_diffs(path), final.splitlines()
    for i, (name, diff) in enumerate(diffs[:-1]):
        later = {line[1:] for _, d in diffs[i + 1:] for line in d if line[:1] in "+-"}
        for k in range(1, len(diff) - 1):
            run = diff[k - 1:k + 2]
            if (all(line.startswith("+") and not line.startswith("+++") for line in run)
                    and re.fullmatch(r"\s*def .*:", run[1][1:])
                    and all(lines.count(line[1:]) == 1 and line[1:] not in later for line in run)):
                return name, run[1][1:]
    raise AssertionError(f"no patch but the last adds a line of {path} no later patch changes")


def editor_script(path: Path, line: str) -> Path:
    """$EDITOR: appends a comment to `line` of the file it is given."""
    path.write_text(f"#!{sys.executable}\nimport sys\nf = sys.argv[1]\nold = {line + chr(10)!r}\n"
                    f"text = open(f).read()\nassert text.count(old) == 1\n"
                    f"open(f, 'w').write(text.replace(old, {line + EDIT_MARK + chr(10)!r}))\n")
    path.chmod(0o755)
    return path


def diff_key(text: str) -> bytes:
    return refresh_cmd.diff_key(text.encode())


def test_edit_recipe(tmp_path: Path, base_tree: Dict[str, bytes]) -> None:
    """The edit goes into the patch that wrote the line, not the last one changing the file."""
    owner, line = line_of_an_earlier_patch(EDITED, applied_bytes(tmp_path, base_tree)[EDITED].decode())
    project = project_copy(tmp_path / "project")
    checkout = v1131_checkout(tmp_path / "pytorch")
    old_patches = {p.name: p.read_text() for p in (project / "patches").glob("*.patch")}
    env = no_identity_env(tmp_path / "home", PYTORCH=str(checkout),
                          EDITOR=str(editor_script(tmp_path / "editor", line)))
    proc = run_recipe(recipe("edit"), project, env, drop=PREREQUISITES)
    assert "installed import hook into" in proc.stdout  # upstream-tests made overlay and hook
    tested = proc.stdout.split("differing from", 1)[1].splitlines()[0]
    assert EDITED in tested  # the edited checkout file is what ran
    assert "patched regressions: 0" in proc.stdout  # upstream's unmodified test_fake_tensor.py
    assert "the series' tests failing: 0" in proc.stdout  # the checkout's, patched side only
    assert re.search(rf"^fold: {EDITED} line \d+ -> {owner[:4]} ", proc.stdout, flags=re.M)
    new_patches = {p.name: p.read_text() for p in (project / "patches").glob("*.patch")}
    assert new_patches.keys() == old_patches.keys()
    changed = [name for name in new_patches if diff_key(new_patches[name]) != diff_key(old_patches[name])]
    assert changed == [owner] and f"+{line}{EDIT_MARK}\n" in new_patches[owner]
    overlay = project / "torch_overlay" / EDITED
    assert f"\n{line}{EDIT_MARK}\n" in overlay.read_text()
    assert (REPO / "torch_overlay" / EDITED).read_text() != overlay.read_text()
