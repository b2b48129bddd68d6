"""Who an export names as the author of its patches.

The commits of patches/ carry placeholder identities (patches/identity.json, under the `.invalid`
domain, which no mail reaches): fixed, so that `refresh` and the tool's own `git am` give
byte-identical patches on any machine. An export goes to a reviewer or into a package, so it
names a real person instead: `--author "Name <email>"`, else git's configured identity (the
GIT_AUTHOR_NAME/GIT_AUTHOR_EMAIL variables, then `author.*`/`user.*` config, never guessed from the
host name), else the export fails, writing nothing, with the commands that set one.
Only placeholder authors are replaced: a patch by someone else keeps its author.
"""
from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import NamedTuple, Optional

from .common import PatchsetError, Runner

PLACEHOLDER_DOMAIN = ".invalid"  # RFC 2606: reserved, never a real address
IDENT = re.compile(r"^\s*(?P<name>[^<>\n]*[^<>\s])\s*<(?P<email>[^<>\s@]+@[^<>\s@]+)>\s*$")
HOW_TO_SET = (
    "pass --author 'Your Name <you@example.org>', or set git's identity: "
    "git config --global user.name 'Your Name' && git config --global user.email you@example.org"
)


class Author(NamedTuple):
    name: str
    email: str

    def __str__(self) -> str:
        return f"{self.name} <{self.email}>"

    def git_config_args(self) -> str:
        """`-c user.name=... -c user.email=...`: a git command's committer without any config."""
        return " ".join(f"-c {shlex.quote(f'user.{key}={value}')}"
                        for key, value in (("name", self.name), ("email", self.email)))


def is_placeholder(email: str) -> bool:
    return email.lower().rstrip(">").endswith(PLACEHOLDER_DOMAIN)


def parse_author(text: str, what: str = "--author") -> Author:
    match = IDENT.match(text)
    if match is None:
        raise PatchsetError(f"{what} {text!r} is not of the form 'Name <email>'")
    author = Author(match["name"], match["email"])
    if is_placeholder(author.email):
        raise PatchsetError(f"{what} {author} is a placeholder address ({PLACEHOLDER_DOMAIN} "
                            f"receives no mail); {HOW_TO_SET}")
    return author


def configured_author(runner: Runner, cwd: Path) -> Optional[Author]:
    """git's author identity as the user configured it (environment or config), or None."""
    proc = runner.git("-c", "user.useConfigOnly=true", "var", "GIT_AUTHOR_IDENT", cwd=cwd,
                      capture=True, check=False)
    if proc.returncode != 0:
        return None
    ident = proc.stdout.strip().rsplit(" ", 2)[0]  # drop "<timestamp> <tz>"
    return parse_author(ident, "git's configured identity")


def export_author(runner: Runner, given: Optional[str], cwd: Path) -> Author:
    """The author an export names: --author, else git's configured identity, else an error."""
    if given is not None:
        return parse_author(given)
    author = configured_author(runner, cwd)
    if author is None:
        raise PatchsetError("no author for the exported patches (git has no identity "
                            f"configured); {HOW_TO_SET}")
    return author
