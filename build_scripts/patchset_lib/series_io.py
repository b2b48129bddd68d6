"""The canonical way patches are produced: git only, byte-reproducible (`series` applies them).

`format_series` is the one producer of `patches/NNNN-Subject.patch` + `patches/series`; refresh,
and the lead's manual runs use it, so a patch file differs only when its commit does.
Reproducibility rests on: fixed format-patch options (every option that a user's config could
change is given explicitly), git config isolated from the user's (`GIT_CONFIG_GLOBAL=/dev/null`,
no system config, C locale for diffstat wording), fixed identities and dates for the commits we
create, and `--zero-commit` so commit ids never appear in patch files.

Temp repos are built from the pristine base files only (three files, not the 134 MB tree): the
patches touch nothing else, and a tiny repo makes `git am` / `format-patch` instant.
"""
from __future__ import annotations

import os
import tarfile
from pathlib import Path
from typing import Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from .common import (
    PatchsetError,
    Project,
    ABSENT,
    Runner,
    git_identity_env,
    identity,
    bytes_digest,
    base_pin,
    check_base_hashes,
    read_base_hashes,
)

# The canonical options of `patches/`: `-N` gives "[PATCH]" subjects whatever the series length,
# so inserting a patch does not rewrite the subject line of every other one.
CANONICAL_OPTIONS: Sequence[str] = (
    "--zero-commit",
    "--no-signature",
    "--full-index",
    "--stat=80",
    "-N",
    "--no-cover-letter",
    "--no-base",
)

# Options that only pin down what a user's or a repo's config could otherwise change.
PINNED_OPTIONS: Sequence[str] = (
    "--no-thread",
    "--no-to",
    "--no-cc",
    "--no-add-header",
    "--subject-prefix=PATCH",
    "--suffix=.patch",
    "--filename-max-length=64",
    "--src-prefix=a/",
    "--dst-prefix=b/",
    "--no-renames",
    "--diff-algorithm=myers",
)

# The base commit of every temp repo: fixed, so `base-commit:` of an export is stable.
BASE_IDENTITY: Mapping[str, str] = {
    "GIT_AUTHOR_NAME": "PyTorch v1.13.1 base",
    "GIT_AUTHOR_EMAIL": "base@fake-tensor-patchset.invalid",
    "GIT_AUTHOR_DATE": "2022-12-15T00:00:00+00:00",
    "GIT_COMMITTER_NAME": "PyTorch v1.13.1 base",
    "GIT_COMMITTER_EMAIL": "base@fake-tensor-patchset.invalid",
    "GIT_COMMITTER_DATE": "2022-12-15T00:00:00+00:00",
}
BASE_MESSAGE = "PyTorch v1.13.1 base files\n\nThe files the patch set touches, as in tag v1.13.1.\n"
BRANCH = "main"


def isolated_env(cwd: Optional[Path] = None) -> Dict[str, str]:
    """git without the user's global/system config, in the C locale; stops repo discovery at cwd."""
    env = {
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "LC_ALL": "C",
        "LANGUAGE": "",
    }
    if cwd is not None:
        # A git-less temp dir inside some work tree must not be taken for part of it.
        env["GIT_CEILING_DIRECTORIES"] = str(Path(cwd).resolve().parent)
    return env


def commit_env(project: Project) -> Dict[str, str]:
    """Identity and dates (author and committer) for commits the tool creates."""
    return {
        **isolated_env(),
        **git_identity_env(project),
        "GIT_AUTHOR_DATE": identity(project)["date"],
    }


def am_env(project: Project) -> Dict[str, str]:
    """For `git am` into the tool's temporary repos: the author (and date) come from each
    patch, the committer identity and date are fixed."""
    return {k: v for k, v in commit_env(project).items() if not k.startswith("GIT_AUTHOR")}


def write_files(root: Path, files: Mapping[str, bytes]) -> None:
    for path, data in files.items():
        target = root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)


def read_files(root: Path, paths: Iterable[str]) -> Dict[str, bytes]:
    """The bytes of those of `paths` that are files under root."""
    return {path: (root / path).read_bytes() for path in paths if (root / path).is_file()}


def check_pristine_files(files: Mapping[str, bytes], hashes: Mapping[str, str]) -> Optional[str]:
    return check_base_hashes(hashes, bytes_digest(files), lambda path: f"pristine base file {path}")


def pristine_files(project: Project) -> Dict[str, bytes]:
    """The base files of patches/base.sha256, from .cache/pristine or an unpatched default checkout."""
    hashes = read_base_hashes(project)
    problems = []
    for root in (project.pristine, project.default_checkout):
        if not all((root / path).is_file() for path, d in hashes.items() if d != ABSENT):
            problems.append(f"{root}: files missing")
            continue
        files = read_files(root, hashes)
        error = check_pristine_files(files, hashes)
        if error is None:
            return files
        problems.append(f"{root}: {error}")
    raise PatchsetError(
        "no pristine base files (" + "; ".join(problems) + "); run `patchset setup` first"
    )


def init_repo(dest: Path, runner: Runner) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    runner.git("init", "-q", f"--initial-branch={BRANCH}", cwd=dest, env=isolated_env(dest),
               capture=True)


def make_base_repo(pristine_files: Mapping[str, bytes], dest: Path, runner: Runner) -> str:
    """A new git repo at `dest` whose one commit holds the pristine files; returns its commit id."""
    init_repo(dest, runner)
    write_files(dest, pristine_files)
    return commit_base(dest, runner, sorted(pristine_files), BASE_MESSAGE)


def commit_base(repo: Path, runner: Runner, paths: Sequence[str], message: str) -> str:
    """Commit `paths` of repo's work tree (ignored ones too) as the fixed base identity at its
    fixed date, so no git identity is needed and the commit id is reproducible; returns it."""
    env = {**isolated_env(), **BASE_IDENTITY}
    runner.git("add", "--force", "--", *paths, cwd=repo, env=env, capture=True)
    runner.git("commit", "-q", "--no-verify", "-m", message, cwd=repo, env=env, capture=True)
    return head(repo, runner)


def make_git_checkout(project: Project, runner: Runner, tree: Path) -> str:
    """`git init` the pristine tree, commit all of it, tag it; returns the commit id."""
    pin = base_pin(project)
    tag = pin["upstream_tag"]
    message = (f"PyTorch {tag}\n\nThe tree of Debian's {pin['debian_source_package']} "
               f"{pin['debian_source_version']} orig tarball (sha256-checked), as `patchset "
               f"pristine --git` makes it.\nUpstream's {tag} is commit {pin['upstream_commit']}.\n")
    init_repo(tree, runner)
    commit = commit_base(tree, runner, ["."], message)
    runner.git("tag", tag, commit, cwd=tree, env=isolated_env(), capture=True)
    return commit


def git_out(repo: Path, runner: Runner, *args: str, env: Optional[Mapping[str, str]] = None,
            check: bool = True) -> str:
    """git's stdout in repo, with the isolated env (plus `env`); "" for a failure when not `check`."""
    proc = runner.git(*args, cwd=repo, env={**isolated_env(), **(env or {})}, capture=True, check=check)
    return proc.stdout if proc.returncode == 0 else ""


def head(repo: Path, runner: Runner, rev: str = "HEAD") -> str:
    return runner.git("rev-parse", "--verify", f"{rev}^{{commit}}", cwd=repo, env=isolated_env(),
                      capture=True).stdout.strip()


def am_series(repo: Path, patches: Sequence[Path], runner: Runner, env: Mapping[str, str]) -> None:
    """`git am` the patches in order; on failure abort (repo back at its HEAD) and name the patch."""
    if not patches:
        return
    proc = runner.git("am", "-q", "--no-3way", "--no-keep-cr", *[str(p) for p in patches],
                      cwd=repo, env={**isolated_env(), **env}, capture=True, check=False)
    if proc.returncode == 0:
        return
    runner.git("am", "--abort", cwd=repo, env=isolated_env(), capture=True, check=False)
    raise PatchsetError(
        "git am failed: " + (proc.stdout + proc.stderr).strip().replace("\n", "\n  ")
    )


def reauthor(repo: Path, base: str, replace: Callable[[str, str], Optional[Tuple[str, str]]],
             runner: Runner, env: Mapping[str, str], trailers: Sequence[str] = ()) -> None:
    """Rewrite base..HEAD of repo's branch, giving each commit for which replace(name, email)
    returns a (name, email) that author and every commit the `trailers` (`Key: value`, added by
    `git interpret-trailers`); trees, the rest of the messages and author dates stay as they were."""
    revs = runner.git("rev-list", "--reverse", f"{base}..HEAD", cwd=repo, env=isolated_env(),
                      capture=True).stdout.split()
    parent = base
    for rev in revs:
        name, email, date = runner.git("log", "-1", "--format=%an%x00%ae%x00%aI", rev, cwd=repo,
                                       env=isolated_env(), capture=True).stdout.rstrip("\n").split("\0")
        name, email = replace(name, email) or (name, email)
        message = runner.git("cat-file", "commit", rev, cwd=repo, env=isolated_env(),
                             capture=True).stdout.split("\n\n", 1)[1]
        if trailers:
            message = runner.git("interpret-trailers", *[a for t in trailers for a in ("--trailer", t)],
                                 cwd=repo, env=isolated_env(), input=message, capture=True).stdout
        author = {"GIT_AUTHOR_NAME": name, "GIT_AUTHOR_EMAIL": email, "GIT_AUTHOR_DATE": date}
        parent = runner.git("commit-tree", f"{rev}^{{tree}}", "-p", parent, cwd=repo,
                            env={**isolated_env(), **env, **author}, input=message,
                            capture=True).stdout.strip()
    runner.git("update-ref", f"refs/heads/{BRANCH}", parent, cwd=repo, env=isolated_env(),
               capture=True)


def format_patches(repo: Path, rev_range: str, out_dir: Path, runner: Runner,
                   options: Sequence[str], env: Optional[Mapping[str, str]] = None) -> List[Path]:
    """`git format-patch` into out_dir with the pinned options; returns the files in series order."""
    out_dir.mkdir(parents=True, exist_ok=True)
    proc = runner.git(
        "format-patch", *options, *PINNED_OPTIONS, "-o", str(out_dir.resolve()), rev_range,
        cwd=repo, env={**isolated_env(), **(env or {})}, capture=True,
    )
    return [Path(line.strip()) for line in proc.stdout.splitlines() if line.strip()]


def series_text(patches: Sequence[Path]) -> str:
    return "".join(f"{p.name}\n" for p in patches)


def format_series(repo: Path, base_rev: str, out_dir: Path, runner: Runner,
                  start_number: int = 1) -> List[Path]:
    """Canonical patches for base_rev..HEAD of repo into out_dir, plus out_dir/series."""
    patches = format_patches(repo, f"{base_rev}..HEAD", out_dir, runner,
                             [*CANONICAL_OPTIONS, f"--start-number={start_number}"])
    (out_dir / "series").write_text(series_text(patches))
    return patches


def changed_paths(repo: Path, old: str, new: str, runner: Runner) -> List[str]:
    out = runner.git("diff", "--name-only", "--no-renames", "-z", old, new, "--",
                     cwd=repo, env=isolated_env(), capture=True).stdout
    return sorted(p for p in out.split("\0") if p)


def rev_files(repo: Path, rev: str, paths: Sequence[str], runner: Runner,
              scratch: Path) -> Dict[str, bytes]:
    """Bytes of `paths` at `rev` (paths missing there are left out), exact: via `git archive`."""
    listed = runner.git("ls-tree", "-r", "-z", "--name-only", rev, "--", *paths,
                        cwd=repo, env=isolated_env(), capture=True).stdout
    present = sorted(p for p in listed.split("\0") if p)
    if not present:
        return {}
    tar = scratch / "rev-files.tar"
    runner.git("archive", "--format=tar", "-o", str(tar.resolve()), rev, "--", *present,
               cwd=repo, env=isolated_env(), capture=True)
    return _read_tar(tar, present)


def _read_tar(tar: Path, paths: Sequence[str]) -> Dict[str, bytes]:
    files: Dict[str, bytes] = {}
    with tarfile.open(tar) as archive:
        for path in paths:
            member = archive.extractfile(path)
            if member is not None:
                files[path] = member.read()
    return files
