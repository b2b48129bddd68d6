"""`patchset export`: a git series with cover letter (for `git am`), a quilt directory (DEP-3),
and the quilt patches dropped into a package's debian/patches after its own.

Every export is applied for real: `git am` into a repo of the pristine base files on a machine
without a git identity, `quilt push -a` / `quilt pop -a` on a copy of a small source tree, and
the package's own patches then ours. Exports name the author of record: the series author of
patches/author.json when a maintainer set one (`patchset author set`), else the series' own
identity of patches/identity.json; never whoever runs the export, who can only add a
Signed-off-by: trailer. `--stack` exports only the selected stacks of patches/stacks.json and
refuses, writing nothing, a selection whose needs are not all selected. An export needs nothing
of `setup`: a clone with only the orig tarball `pristine` uses exports the real series.
"""
import argparse
import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Dict, Optional, Sequence

import pytest
from conftest import (
    IDENTITY,
    SMALL_BASE,
    UPSTREAM_COMMIT,
    SeriesEdit,
    commit_series,
    DEBIAN_OWN_PATCH,
    DEBIAN_SERIES,
    REPO,
    copy_tool,
    fresh_clone,
    make_small_project,
    run_tool,
    sha,
    tree_hashes,
)
from conftest import package_tree as conftest_package_tree

from patchset_lib import export_cmd, series_io
from patchset_lib.authorship import author_file, set_series_author
from patchset_lib.common import PatchsetError, Project, Runner, read_series

PRISTINE = SMALL_BASE
COVER = "Subject of the series\n\nWhat the series does, briefly.\n"
FIRST_MESSAGE = ("Weak memo for converters\n\nWhy: finalizers leak.\n\nWhat: weak refs we own.\n\n"
                 "Bug: https://github.com/pytorch/pytorch/issues/80544\n"
                 "Bug: https://github.com/pytorch/pytorch/pull/12345\nForwarded: no\n")
RESULT = {
    "torch/_subclasses/meta_utils.py": b"def meta():\n    return 10\n",
    "torch/_subclasses/fake_tensor.py": b"def fake():\n    return 20\n",
    "test/test_fake_tensor.py": PRISTINE["test/test_fake_tensor.py"] + b"# ours\n",
}
EDITS: Sequence[SeriesEdit] = (
    SeriesEdit(FIRST_MESSAGE,
               {"torch/_subclasses/meta_utils.py": RESULT["torch/_subclasses/meta_utils.py"]},
               author_date="2026-12-02T09:00:00+00:00"),
    SeriesEdit("Fallback aliasing\n\nOutputs alias inputs.\n",
               {"torch/_subclasses/fake_tensor.py": RESULT["torch/_subclasses/fake_tensor.py"]},
               author_date="2026-12-04T09:10:00+00:00",  # not identity.json's date
               author=("Patchset Dev", "dev@fake-tensor-patchset.invalid")),
    SeriesEdit("Add patch-set tests to test_fake_tensor.py\n\nGenerated.\n",
               {"test/test_fake_tensor.py": RESULT["test/test_fake_tensor.py"]},
               author_date="2026-12-02T00:00:00+00:00",
               author=("Real Contributor", "rc@example.org")),
)


@pytest.fixture
def project(tmp_path: Path, runner: Runner) -> Project:
    project = make_small_project(tmp_path / "proj")
    (project.patches / "cover-letter.txt").write_text(COVER)
    commit_series(project, runner, EDITS, tmp_path)
    set_series_author(project, AUTHOR)
    (project.patches / "upstream-status.json").write_text(json.dumps(STATUS))
    return project


STATUS = {
    "Weak memo for converters": {
        "forwarded": "no", "why": "Upstream rewrote the converter since.",
        "later_torch": "fixed differently in torch 2.0 (weak dictionaries in meta_utils.py)",
        "follows": "https://github.com/pytorch/pytorch/pull/80544",
        "bug": ["https://github.com/pytorch/pytorch/issues/80544", "https://github.com/pytorch/pytorch/issues/99"]},
    "Fallback aliasing": {"forwarded": "not-needed", "why": "Only 1.13 needs it.",
                          "later_torch": "still open"},
    "Add patch-set tests to test_fake_tensor.py": {"forwarded": "no", "why": "Tests of the above.",
                                                   "later_torch": "not yet checked"},
}
AUTHOR = "Jane Maintainer <jane@example.org>"
SIGNER = "Sam Packager <sam@example.org>"
# A placeholder address anywhere in an export: the identity of patches/ or any `.invalid` one.
PLACEHOLDER = re.compile(r"[@.][\w.-]*\.invalid\b")


def export(project: Project, runner: Runner, fmt: Optional[str], out: Optional[Path] = None,
           signed_off_by: Optional[str] = None, debian_patches: Optional[Path] = None,
           subdir: str = "fake-tensor", stack: Optional[str] = None, conda_forge: Optional[Path] = None) -> int:
    args = argparse.Namespace(format=fmt, out=None if out is None else str(out), signed_off_by=signed_off_by,
                              debian_patches=None if debian_patches is None else str(debian_patches),
                              subdir=subdir, conda_forge=None if conda_forge is None else str(conda_forge),
                              stack=stack)
    return export_cmd.cmd_export(project, runner, args)


def placeholder_hits(root: Path) -> Dict[str, str]:
    return {str(p.relative_to(root)): m.group(0) for p in sorted(root.rglob("*")) if p.is_file()
            for m in [PLACEHOLDER.search(p.read_text())] if m}


@pytest.fixture
def no_git_identity(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A machine where git knows nobody (as CI's root may be): no config, no identity variables."""
    home = tmp_path / "home-without-gitconfig"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", os.devnull)
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    for name in ("GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL", "GIT_COMMITTER_NAME", "GIT_COMMITTER_EMAIL",
                 "EMAIL"):
        monkeypatch.delenv(name, raising=False)


# ---- git ---------------------------------------------------------------------------------------


def test_git_export_is_byte_reproducible(project: Project, runner: Runner, tmp_path: Path) -> None:
    export(project, runner, "git", tmp_path / "a")
    export(project, runner, "git", tmp_path / "b")
    a, b = tree_hashes(tmp_path / "a"), tree_hashes(tmp_path / "b")
    assert a == b
    assert sorted(a) == [
        "0000-cover-letter.patch",
        "0001-Weak-memo-for-converters.patch",
        "0002-Fallback-aliasing.patch",
        "0003-Add-patch-set-tests-to-test_fake_tensor.py.patch",
    ]


def test_git_cover_letter_has_subject_blurb_base(project: Project, runner: Runner, tmp_path: Path) -> None:
    export(project, runner, "git", tmp_path / "out")
    cover = (tmp_path / "out/0000-cover-letter.patch").read_text()
    assert "Subject: [PATCH 0/3] Subject of the series\n" in cover
    assert "What the series does, briefly." in cover
    assert "*** SUBJECT HERE ***" not in cover and "*** BLURB HERE ***" not in cover
    assert "PyTorch tag v1.13.1" in cover
    for path, data in PRISTINE.items():
        assert f"{sha(data)}  {path}" in cover
    # upstream's v1.13.1 commit, which b4 and GitHub resolve (not the tool's temp repo's)
    assert cover.endswith(f"\n\nbase-commit: {UPSTREAM_COMMIT}\n")
    assert cover.count("base-commit:") == 1
    assert f"\nFrom: {AUTHOR}\n" in cover
    assert ("Later torch, per patch:\n"
            "  0001 Weak memo for converters \u2014 fixed differently in torch 2.0 (weak dictionaries in meta_utils.py)\n"
            "  0002 Fallback aliasing \u2014 still open\n"
            "  0003 Add patch-set tests to test_fake_tensor.py \u2014 not yet checked\n") in cover
    first = (tmp_path / "out/0001-Weak-memo-for-converters.patch").read_text()
    assert f"\nFrom: {AUTHOR}\n" in first
    assert "Subject: [PATCH 1/3] Weak memo for converters" in first
    assert "Date: Wed, 2 Dec 2026 09:00:00 +0000" in first
    for path in (tmp_path / "out").iterdir():
        assert re.findall(r"\w+://[^/\s]+", path.read_text()) in ([], ["https://github.com"] * 2)


def test_git_export_applies_with_the_printed_git_am_without_a_git_identity(
        project: Project, runner: Runner, tmp_path: Path, no_git_identity: None,
        capsys: pytest.CaptureFixture) -> None:
    export(project, runner, "git", tmp_path / "out")
    printed = capsys.readouterr().out.splitlines()
    command = printed[printed.index(next(l for l in printed if l.startswith("apply on a v1.13.1"))) + 1]
    repo = tmp_path / "am"
    base = series_io.make_base_repo(PRISTINE, repo, runner)
    plain_am = subprocess.run("git am -q " + " ".join(str(p) for p in sorted(
        (tmp_path / "out").glob("000[1-9]-*.patch"))), shell=True, cwd=repo, capture_output=True,
        text=True)
    assert plain_am.returncode != 0 and "identity unknown" in plain_am.stderr  # the trap
    runner.git("am", "--abort", cwd=repo, check=False, capture=True)
    am = subprocess.run(command.strip(), shell=True, cwd=repo, capture_output=True, text=True)
    assert am.returncode == 0, am.stderr
    assert series_io.read_files(repo, RESULT) == RESULT
    log = runner.git("log", "--reverse", "--format=%an <%ae>|%cn <%ce>|%aI|%s", f"{base}..HEAD",
                     cwd=repo, capture=True).stdout.splitlines()
    assert log == [  # placeholder authors replaced, a real one kept; the series author committed
        f"{AUTHOR}|{AUTHOR}|2026-12-02T09:00:00+00:00|Weak memo for converters",
        f"{AUTHOR}|{AUTHOR}|2026-12-04T09:10:00+00:00|Fallback aliasing",
        f"Real Contributor <rc@example.org>|{AUTHOR}|2026-12-02T00:00:00+00:00|"
        "Add patch-set tests to test_fake_tensor.py",
    ]
    trailers = runner.git("log", "-1", "--format=%(trailers:only,unfold)", "HEAD~2",
                          cwd=repo, capture=True).stdout
    assert "Bug: https://github.com/pytorch/pytorch/issues/80544" in trailers


# ---- quilt -------------------------------------------------------------------------------------


def test_quilt_export_has_dep3_headers(project: Project, runner: Runner, tmp_path: Path) -> None:
    export(project, runner, "quilt", tmp_path / "q")
    out = tmp_path / "q"
    names = (out / "series").read_text().splitlines()
    assert names == [p.name for p in read_series(project)]
    first = (out / names[0]).read_text()
    header, diff = first.split("\n---\n", 1)
    series_sha = sha(b"".join(p.read_bytes() for p in read_series(project)))  # all 64 digits
    assert header.splitlines() == [
        "Description: Weak memo for converters",
        " Why: finalizers leak.",
        " .",
        " What: weak refs we own.",
        " .",
        " Upstream: Upstream rewrote the converter since.",
        " Later torch: fixed differently in torch 2.0 (weak dictionaries in meta_utils.py)",
        " Follows up https://github.com/pytorch/pytorch/pull/80544",
        f"Author: {AUTHOR}",
        f"Origin: other, fake-tensor patch set for PyTorch v1.13.1 (series sha256 {series_sha})",
        "Bug: https://github.com/pytorch/pytorch/issues/80544",  # the trailer and the entry, once
        "Bug: https://github.com/pytorch/pytorch/pull/12345",
        "Bug: https://github.com/pytorch/pytorch/issues/99",
        "Forwarded: no",
        "Last-Update: 2026-12-02",
    ]
    assert diff.startswith(" torch/_subclasses/meta_utils.py | 2 +-\n")
    assert "\ndiff --git a/torch/_subclasses/meta_utils.py b/torch/_subclasses/meta_utils.py\n" in diff
    second = (out / names[1]).read_text()
    assert "\nForwarded: not-needed\n" in second and "\nBug:" not in second
    assert "\n Upstream: Only 1.13 needs it.\n Later torch: still open\nAuthor:" in second
    assert "\nDate: Fri, 4 Dec 2026 09:10:00 +0000\n" in read_series(project)[1].read_text()
    assert "\nLast-Update: 2026-12-04\n" in second  # the patch's own date
    assert f"\nAuthor: {AUTHOR}\n" in second  # the other placeholder identity, replaced too
    assert "\nAuthor: Real Contributor <rc@example.org>\n" in (out / names[2]).read_text()
    for name in names:
        text = (out / name).read_text()
        assert not text.startswith("From ") and "\nFrom: " not in text
        assert set(re.findall(r"\w+://[^/\s]+", text)) <= {"https://github.com"}
        assert text.startswith("Description: ")


def test_quilt_export_is_byte_reproducible(project: Project, runner: Runner, tmp_path: Path) -> None:
    export(project, runner, "quilt", tmp_path / "a")
    export(project, runner, "quilt", tmp_path / "b")
    assert tree_hashes(tmp_path / "a") == tree_hashes(tmp_path / "b")
    assert len(tree_hashes(tmp_path / "a")) == 4  # series + 3 patches


def test_quilt_push_and_pop_on_a_source_tree(project: Project, runner: Runner, tmp_path: Path) -> None:
    export(project, runner, "quilt", tmp_path / "q")
    tree = tmp_path / "pytorch-1.13.1"
    series_io.write_files(tree, {**PRISTINE, "setup.py": b"# untouched\n",
                                 "torch/_subclasses/__init__.py": b""})
    before = tree_hashes(tree)
    env = {"QUILT_PATCHES": str(tmp_path / "q")}
    pushed = runner.run(["quilt", "--quiltrc", "-", "push", "-a"], cwd=tree, env=env, capture=True,
                        check=False)
    assert pushed.returncode == 0, pushed.stdout + pushed.stderr
    after = tree_hashes(tree, skip=".pc")
    assert after == {**before, **{p: sha(d) for p, d in RESULT.items()}}
    popped = runner.run(["quilt", "--quiltrc", "-", "pop", "-a"], cwd=tree, env=env, capture=True,
                        check=False)
    assert popped.returncode == 0, popped.stdout + popped.stderr
    assert tree_hashes(tree, skip=".pc") == before


# ---- the author -------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["git", "quilt"])
def test_no_placeholder_identity_in_an_export(project: Project, runner: Runner, tmp_path: Path,
                                              fmt: str) -> None:
    assert placeholder_hits(project.patches) != {}  # the series itself has two
    export(project, runner, fmt, tmp_path / "out")
    assert placeholder_hits(tmp_path / "out") == {}
    assert IDENTITY["name"] not in "".join(p.read_text() for p in (tmp_path / "out").iterdir())


def test_the_runners_git_identity_is_never_the_author(project: Project, runner: Runner, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GIT_AUTHOR_NAME", "Random Runner")
    monkeypatch.setenv("GIT_AUTHOR_EMAIL", "runner@example.org")
    export(project, runner, "quilt", tmp_path / "out")
    first = (tmp_path / "out" / "0001-Weak-memo-for-converters.patch").read_text()
    assert f"\nAuthor: {AUTHOR}\n" in first
    assert "Random Runner" not in "".join(p.read_text() for p in (tmp_path / "out").iterdir())


@pytest.mark.parametrize("fmt", ["git", "quilt"])
def test_signed_off_by_adds_a_trailer_to_each_patch_and_keeps_the_author(
        project: Project, runner: Runner, tmp_path: Path, fmt: str, capsys: pytest.CaptureFixture) -> None:
    export(project, runner, fmt, tmp_path / "out", signed_off_by=SIGNER)
    patches = sorted(p for p in (tmp_path / "out").glob("000[1-9]-*.patch"))
    assert len(patches) == 3
    for patch in patches:
        text = patch.read_text()
        assert text.count(f"Signed-off-by: {SIGNER}\n") == 1, patch.name
    first = patches[0].read_text()
    assert (f"\nFrom: {AUTHOR}\n" if fmt == "git" else f"\nAuthor: {AUTHOR}\n") in first
    if fmt == "git":
        assert f"the -c options make {SIGNER} the committer" in capsys.readouterr().out
    for patch in patches:  # last, in the trailer block: after the body and the Upstream: lines
        message = patch.read_text().split("\n---\n", 1)[0]
        if fmt == "git":
            message = message.split("\n\n", 1)[1]  # the body after the mail header
            parsed = subprocess.run(["git", "interpret-trailers", "--parse"], input=message, cwd=tmp_path,
                                    capture_output=True, text=True, check=True).stdout
            assert parsed.splitlines()[-1] == f"Signed-off-by: {SIGNER}", patch.name
            assert message.endswith(f"\nSigned-off-by: {SIGNER}"), patch.name
        else:
            description = message.split("\nAuthor: ", 1)[0]
            assert description.endswith(f"\n .\n Signed-off-by: {SIGNER}"), patch.name
            assert "\n Later torch: " in description, patch.name


IDENTITY_LINE = ("author: Fake Tensor Patch Set <patchset@example.invalid> (patches/identity.json; "
                 "set another with 'patchset author set')")


@pytest.mark.parametrize("fmt", ["git", "quilt"])
def test_without_author_json_exports_name_the_series_identity(
        project: Project, runner: Runner, tmp_path: Path, fmt: str, capsys: pytest.CaptureFixture) -> None:
    author_file(project).unlink()
    assert export(project, runner, fmt, tmp_path / "out", signed_off_by=SIGNER) == 0
    assert capsys.readouterr().out.splitlines()[0] == IDENTITY_LINE
    field = "From" if fmt == "git" else "Author"
    ident = f"{IDENTITY['name']} <{IDENTITY['email']}>"
    texts = [p.read_text() for p in sorted((tmp_path / "out").glob("000[1-9]-*.patch"))]
    # both placeholder authors (identity.json's and another) name the identity; a real one is
    # kept (git: the in-body From: line after the mail header's)
    assert [re.findall(rf"^{field}: (.*)$", t, re.M)[-1] for t in texts] == [
        ident, ident, "Real Contributor <rc@example.org>"]
    assert all(t.count(f"Signed-off-by: {SIGNER}") == 1 for t in texts)


def test_with_author_json_the_line_names_it(project: Project, runner: Runner, tmp_path: Path,
                                            capsys: pytest.CaptureFixture) -> None:
    export(project, runner, "quilt", tmp_path / "out")
    assert capsys.readouterr().out.splitlines()[0] == f"author: {AUTHOR} (patches/author.json)"


def test_cli_without_author_json_exports_and_says_whom_it_names(project: Project, tmp_path: Path) -> None:
    copy_tool(project.root)
    author_file(project).unlink()
    proc = run_tool(project.root, "export", "--format", "git", "--out", str(tmp_path / "out"))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[0] == IDENTITY_LINE
    assert len(list((tmp_path / "out").iterdir())) == 4


def test_author_set_writes_the_identity_file(project: Project) -> None:
    copy_tool(project.root)
    proc = run_tool(project.root, "author", "set", "Ada Lovelace <ada@example.org>")
    assert proc.returncode == 0, proc.stderr
    assert author_file(project).read_text() == (
        '{\n  "name": "Ada Lovelace",\n  "email": "ada@example.org"\n}\n')


@pytest.mark.parametrize("given, error", [
    ("Fake Tensor Patch Set <patchset@example.invalid>", "placeholder address"),
    ("jane@example.org", "not of the form 'Name <email>'"),
    ("Jane <not-an-address>", "not of the form 'Name <email>'"),
])
def test_bad_identity_is_refused_by_author_set_and_signed_off_by(
        project: Project, runner: Runner, tmp_path: Path, given: str, error: str) -> None:
    copy_tool(project.root)
    before = author_file(project).read_bytes()
    proc = run_tool(project.root, "author", "set", given)
    assert proc.returncode == 1 and error in proc.stderr
    assert author_file(project).read_bytes() == before
    with pytest.raises(PatchsetError, match=f"--signed-off-by .*{re.escape(error)}"):
        export(project, runner, "git", tmp_path / "out", signed_off_by=given)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("content, error", [
    ("not json", "is not JSON"),
    ('{"name": "Jane", "email": "jane@example.org", "date": "x"}', 'exactly "name" and "email"'),
    ('{"name": "Jane", "email": "jane@example.invalid"}', "placeholder address"),
])
def test_bad_author_file_is_refused(project: Project, runner: Runner, tmp_path: Path, content: str,
                                    error: str) -> None:
    author_file(project).write_text(content)
    with pytest.raises(PatchsetError, match=re.escape(error)):
        export(project, runner, "quilt", tmp_path / "out")
    assert not (tmp_path / "out").exists()


# ---- into a package's debian/patches ---------------------------------------------------------

def package_tree(root: Path) -> Path:
    return conftest_package_tree(root, {**PRISTINE, "torch/_subclasses/__init__.py": b""})


def source_hashes(tree: Path) -> Dict[str, str]:
    """The tree's files outside debian/ and quilt's .pc/."""
    return {p: h for p, h in tree_hashes(tree, skip="debian").items() if not p.startswith(".pc/")}


def quilt(tree: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["quilt", "--quiltrc", "-", *args], cwd=tree, capture_output=True, text=True,
                          env={**os.environ, "QUILT_PATCHES": "debian/patches"})


def test_drop_in_keeps_the_package_series_first_and_quilt_applies_all(
        project: Project, runner: Runner, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    tree = package_tree(tmp_path / "pytorch-1.13.1")
    dp = tree / "debian/patches"
    orig = source_hashes(tree)
    assert export(project, runner, None, debian_patches=dp) == 0
    ours = [p.name for p in read_series(project)]
    assert (dp / "series").read_text() == DEBIAN_SERIES + "".join(f"fake-tensor/{n}\n" for n in ours)
    assert (dp / "0001-debian-setup.patch").read_bytes() == DEBIAN_OWN_PATCH
    export(project, runner, "quilt", tmp_path / "q")  # the same bytes as the plain quilt export
    assert tree_hashes(dp / "fake-tensor") == {n: h for n, h in tree_hashes(tmp_path / "q").items()
                                               if n != "series"}
    assert "3 entries appended after the package's own" in capsys.readouterr().out

    pushed = quilt(tree, "push", "-a")
    assert pushed.returncode == 0, pushed.stdout + pushed.stderr
    assert quilt(tree, "applied").stdout.split() == [
        "0001-debian-setup.patch", *[f"fake-tensor/{n}" for n in ours]]
    assert source_hashes(tree) == {**orig, "setup.py": sha(b"# changed by Debian\n"),
                                   **{p: sha(d) for p, d in RESULT.items()}}
    assert quilt(tree, "pop", "-a").returncode == 0
    assert source_hashes(tree) == orig


def test_drop_in_twice_changes_nothing(project: Project, runner: Runner, tmp_path: Path,
                                       capsys: pytest.CaptureFixture) -> None:
    dp = package_tree(tmp_path / "pkg") / "debian/patches"
    export(project, runner, None, debian_patches=dp)
    first = {p: (p.stat().st_mtime_ns, p.read_bytes()) for p in dp.rglob("*") if p.is_file()}
    capsys.readouterr()
    assert export(project, runner, None, debian_patches=dp) == 0
    assert "already in place" in capsys.readouterr().out
    assert {p: (p.stat().st_mtime_ns, p.read_bytes()) for p in dp.rglob("*") if p.is_file()} == first


@pytest.mark.parametrize("setup, error", [
    ("no series", "has no series file, so it is not a quilt patch directory"),
    ("series lists a missing patch", "lists 0002-gone.patch, which is not in"),
    ("foreign file in subdir", "holds other.patch, which is not a patch of this series"),
    ("our name, other bytes", "0001-Weak-memo-for-converters.patch exists with other contents"),
    ("series lists another patch under subdir", "lists fake-tensor/old.patch, which is not a patch"),
    ("series lists some of ours", "lists only some of this series' patches"),
    ("other author", "exists with other contents"),
])
def test_drop_in_refusals_change_nothing(project: Project, runner: Runner, tmp_path: Path,
                                         setup: str, error: str) -> None:
    dp = package_tree(tmp_path / "pkg") / "debian/patches"
    first = "0001-Weak-memo-for-converters.patch"
    if setup == "no series":
        (dp / "series").unlink()
    elif setup == "series lists a missing patch":
        (dp / "series").write_text(DEBIAN_SERIES + "0002-gone.patch\n")
    elif setup == "foreign file in subdir":
        series_io.write_files(dp / "fake-tensor", {"other.patch": b"x\n"})
    elif setup == "our name, other bytes":
        series_io.write_files(dp / "fake-tensor", {first: b"an older version\n"})
    elif setup == "series lists another patch under subdir":
        series_io.write_files(dp / "fake-tensor", {"old.patch": b"x\n"})
        (dp / "series").write_text(DEBIAN_SERIES + "fake-tensor/old.patch\n")
    elif setup == "series lists some of ours":
        export(project, runner, None, debian_patches=dp)
        (dp / "series").write_text(DEBIAN_SERIES + f"fake-tensor/{first}\n")
    elif setup == "other author":
        export(project, runner, None, debian_patches=dp)
        set_series_author(project, "Someone Else <else@example.org>")
    before = {p: p.read_bytes() for p in dp.rglob("*") if p.is_file()}
    with pytest.raises(PatchsetError, match=re.escape(error)):
        export(project, runner, None, debian_patches=dp)
    assert {p: p.read_bytes() for p in dp.rglob("*") if p.is_file()} == before


def test_drop_in_takes_the_quilt_format_only(project: Project, runner: Runner, tmp_path: Path) -> None:
    dp = package_tree(tmp_path / "pkg") / "debian/patches"
    with pytest.raises(PatchsetError, match="quilt format only"):
        export(project, runner, "git", debian_patches=dp)
    assert (dp / "series").read_text() == DEBIAN_SERIES and not (dp / "fake-tensor").exists()


# ---- refusals ----------------------------------------------------------------------------------


def test_refuses_non_empty_out_dir(project: Project, runner: Runner, tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep").write_text("x")
    with pytest.raises(PatchsetError, match="not an empty directory"):
        export(project, runner, "git", out)
    assert [p.name for p in out.iterdir()] == ["keep"]


def test_missing_base_files_name_the_tarball_and_pristine(project: Project, runner: Runner, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """No .cache/pristine, no checkout, no tarball, and apt cannot fetch it: the refusal says
    where the base files come from, and nothing is written."""
    shutil.rmtree(project.pristine)
    pin = {**json.loads(project.base_pin_file.read_text()), "orig_tarball": "pytorch_1.13.1+dfsg.orig.tar.xz",
           "orig_tarball_sha256": "0" * 64}
    project.base_pin_file.write_text(json.dumps(pin))
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    (fake_bin / "apt-get").write_text("#!/bin/sh\necho 'no network here' >&2\nexit 100\n")
    (fake_bin / "apt-get").chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake_bin}:{os.environ['PATH']}")
    with pytest.raises(PatchsetError, match=r"(?s)the base files come from the verified orig tarball "
                                            r".*pytorch_1.13.1\+dfsg.orig.tar.xz, as for "
                                            r"`./build_scripts/patchset pristine DIR`"):
        export(project, runner, "quilt", tmp_path / "out")
    assert not (tmp_path / "out").exists() and not project.pristine.exists()


def test_wrong_pristine_file_is_refused(project: Project, runner: Runner, tmp_path: Path) -> None:
    (project.pristine / "torch/_subclasses/fake_tensor.py").write_bytes(b"changed\n")
    with pytest.raises(PatchsetError, match="fake_tensor.py differs from the 1.13.1 base"):
        export(project, runner, "git", tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_patch_that_does_not_apply_writes_nothing(project: Project, runner: Runner,
                                                  tmp_path: Path) -> None:
    first = read_series(project)[0]
    first.write_text(first.read_text().replace("-    return 1", "-    return 7"))
    with pytest.raises(PatchsetError, match="git am failed"):
        export(project, runner, "git", tmp_path / "out")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("fmt", ["git", "quilt"])
def test_upstream_status_without_an_entry_is_refused_writing_nothing(
        project: Project, runner: Runner, tmp_path: Path, fmt: str) -> None:
    status = dict(STATUS)
    del status["Fallback aliasing"]
    (project.patches / "upstream-status.json").write_text(json.dumps(status))
    with pytest.raises(PatchsetError, match="upstream-status.json: no entry for 'Fallback aliasing'"):
        export(project, runner, fmt, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_export_warns_when_generated_tests_drifted(project: Project, runner: Runner,
                                                   tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    (project.root / "test").mkdir()
    generated = project.root / "test/test_fake_tensor.py"
    generated.write_bytes(RESULT["test/test_fake_tensor.py"])
    assert export(project, runner, "git", tmp_path / "a") == 0
    assert "warning" not in capsys.readouterr().err
    generated.write_text("import unittest\n\n\nclass PatchSetOnly(unittest.TestCase):\n    pass\n")
    assert export(project, runner, "git", tmp_path / "b") == 0
    err = capsys.readouterr().err
    assert "warning: test/test_fake_tensor.py differs from pristine base + series" in err
    assert len(list((tmp_path / "b").iterdir())) == 4


# ---- --stack ------------------------------------------------------------------------------------

SUBJECTS = ["Weak-memo-for-converters", "Fallback-aliasing", "Add-patch-set-tests-to-test_fake_tensor.py"]


@pytest.fixture
def stacked(project: Project) -> Project:
    """The small series in three stacks: core (1), aliasing (2, needs core), extra (3, needs both)."""
    names = [p.name for p in read_series(project)]
    stacks = [{"name": "core", "fixes": "converters memoize weakly", "needs": [], "patches": names[:1]},
              {"name": "aliasing", "fixes": "fallback outputs alias inputs", "needs": ["core"],
               "patches": names[1:2]},
              {"name": "extra", "fixes": "the tests", "needs": ["core", "aliasing"], "patches": names[2:]}]
    (project.patches / "stacks.json").write_text(json.dumps({"stacks": stacks}))
    return project


@pytest.mark.parametrize("where", ["git", "quilt", "conda-forge", "debian"])
def test_stack_export_without_its_needs_is_refused_naming_them_writing_nothing(
        stacked: Project, runner: Runner, tmp_path: Path, where: str) -> None:
    dp = package_tree(tmp_path / "pkg") / "debian/patches"
    before = tree_hashes(tmp_path)
    kwargs = {"debian": {"debian_patches": dp}, "conda-forge": {"conda_forge": tmp_path / "out"}}.get(
        where, {"out": tmp_path / "out"})
    with pytest.raises(PatchsetError, match=re.escape(
            "the selected stacks need core, aliasing, not selected; nothing written "
            "(select them too: --stack core,aliasing,extra)")):
        export(stacked, runner, where if where in ("git", "quilt") else None, stack="extra", **kwargs)
    assert tree_hashes(tmp_path) == before and not (tmp_path / "out").exists()


def test_git_export_of_core_has_only_cores_patches_and_its_own_cover(
        stacked: Project, runner: Runner, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert export(stacked, runner, "git", tmp_path / "out", stack="core") == 0
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
        "0000-cover-letter.patch", f"0001-{SUBJECTS[0]}.patch"]
    assert "stacks: core (1 patches)" in capsys.readouterr().out
    cover = (tmp_path / "out/0000-cover-letter.patch").read_text()
    assert "Subject: [PATCH 0/1] fake tensors for PyTorch v1.13.1: stack core\n" in cover
    assert "  core (1 patches; needs nothing): converters memoize weakly\n" in cover
    assert "Dependency map (stack <- the stacks it needs):\n\n  core\n" in cover
    assert "What the series does, briefly." not in cover  # not the whole series' cover letter
    assert cover.endswith(f"\n\nbase-commit: {UPSTREAM_COMMIT}\n")
    assert len(cover.split("\n---\n")[0].splitlines()) < 60  # one page
    repo = tmp_path / "am"
    series_io.make_base_repo(PRISTINE, repo, runner)
    series_io.am_series(repo, [tmp_path / "out" / f"0001-{SUBJECTS[0]}.patch"], runner,
                        series_io.am_env(stacked))
    assert series_io.read_files(repo, PRISTINE) == {**PRISTINE, "torch/_subclasses/meta_utils.py":
                                                    RESULT["torch/_subclasses/meta_utils.py"]}


def test_git_cover_of_two_stacks_maps_their_needs(stacked: Project, runner: Runner, tmp_path: Path) -> None:
    export(stacked, runner, "git", tmp_path / "out", stack="aliasing,core")
    cover = (tmp_path / "out/0000-cover-letter.patch").read_text()
    assert "stacks core, aliasing\n" in cover
    assert "  aliasing (1 patches; needs core): fallback outputs alias inputs\n" in cover
    assert "\n  core\n  aliasing <- core\n" in cover
    assert len(list((tmp_path / "out").iterdir())) == 3


def test_quilt_conda_and_debian_exports_of_stacks(stacked: Project, runner: Runner, tmp_path: Path) -> None:
    export(stacked, runner, "quilt", tmp_path / "q", stack="core,aliasing")
    assert (tmp_path / "q/series").read_text().split() == [f"000{i}-{s}.patch" for i, s in enumerate(SUBJECTS[:2], 1)]
    assert "\nOrigin: other, stacks core, aliasing of the fake-tensor patch set for PyTorch v1.13.1 (" in (
        tmp_path / "q" / f"0001-{SUBJECTS[0]}.patch").read_text()
    export(stacked, runner, None, conda_forge=tmp_path / "conda", stack="core")
    assert sorted(p.name for p in (tmp_path / "conda").iterdir()) == [f"0001-{SUBJECTS[0]}.patch", "meta.yaml"]
    assert f"    - 0001-{SUBJECTS[0]}.patch\n" in (tmp_path / "conda/meta.yaml").read_text()
    dp = package_tree(tmp_path / "pkg") / "debian/patches"
    export(stacked, runner, None, debian_patches=dp, stack="core")
    assert (dp / "series").read_text() == DEBIAN_SERIES + f"fake-tensor/0001-{SUBJECTS[0]}.patch\n"


def test_without_stack_the_whole_series_is_exported(stacked: Project, runner: Runner, tmp_path: Path) -> None:
    export(stacked, runner, "git", tmp_path / "a")
    (stacked.patches / "stacks.json").unlink()
    export(stacked, runner, "git", tmp_path / "b")
    assert tree_hashes(tmp_path / "a") == tree_hashes(tmp_path / "b") and len(tree_hashes(tmp_path / "a")) == 4


# ---- a fresh clone: no setup --------------------------------------------------------------------


def test_a_clone_without_setup_exports_with_only_the_orig_tarball(tmp_path: Path) -> None:
    """A clone of this repository (HEAD, with the work tree's tool and patches/) where nothing ran:
    no .venv, no .cache but the verified orig tarball `pristine` uses (fetching it needs the
    network, which CI may lack, so the cached one is linked in). Both formats export the whole
    series with the system python, naming the author of record."""
    clone = fresh_clone(tmp_path / "clone")
    count = len(read_series(Project(clone)))
    python = shutil.which("python3") or "/usr/bin/python3"
    for fmt, files in (("quilt", count + 1), ("git", count + 1)):
        proc = subprocess.run([python, "build_scripts/patchset", "-q", "export", "--format", fmt,
                               "--out", str(tmp_path / fmt)], cwd=clone, capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.splitlines()[0].startswith("author: Fake Tensor Patch Set <")
        assert len(list((tmp_path / fmt).iterdir())) == files
    assert not (clone / ".venv").exists() and not (clone / ".cache/checkout").exists()
