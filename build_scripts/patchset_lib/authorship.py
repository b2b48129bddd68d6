"""Who an export names as the author of its patches: the series' author of record, never the runner.

The commits of patches/ carry the series' own committed identity (patches/identity.json, under
the `.invalid` domain, which no mail reaches): fixed, so that `refresh` and the tool's own
`git am` give byte-identical patches on any machine. That identity is the author of record an
export names by default (the maintainers' decision); a maintainer may set another once with
`patchset author set "Name <email>"` (patches/author.json, committed), which then replaces every
placeholder author. No export refuses for want of author.json, and none invents a person. Only
placeholder authors are replaced: a patch by someone else keeps its author. Whoever runs the
export adds themselves only as a `Signed-off-by:` trailer.
"""
from __future__ import annotations

import json
import re
import shlex
from pathlib import Path
from typing import NamedTuple, Tuple

from .common import PatchsetError, Project, identity, write_text_atomic

PLACEHOLDER_DOMAIN = ".invalid"  # RFC 2606: reserved, never a real address
IDENT = re.compile(r"^\s*(?P<name>[^<>\n]*[^<>\s])\s*<(?P<email>[^<>\s@]+@[^<>\s@]+)>\s*$")
SET_COMMAND = "./build_scripts/patchset author set 'Name <email>'"


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


def parse_author(text: str, what: str) -> Author:
    match = IDENT.match(text)
    if match is None:
        raise PatchsetError(f"{what} {text!r} is not of the form 'Name <email>'")
    author = Author(match["name"], match["email"])
    if is_placeholder(author.email):
        raise PatchsetError(f"{what} {author} is a placeholder address ({PLACEHOLDER_DOMAIN} "
                            "receives no mail); give a real one")
    return author


def author_file(project: Project) -> Path:
    return project.patches / "author.json"


def series_author(project: Project) -> Author:
    """The maintainer of patches/author.json (which must exist), checked as `author set` checks it."""
    path = author_file(project)
    try:
        data = json.loads(path.read_text())
    except ValueError as exc:
        raise PatchsetError(f"{path} is not JSON ({exc}); set it again with {SET_COMMAND}") from exc
    if not isinstance(data, dict) or sorted(data) != ["email", "name"]:
        raise PatchsetError(f"{path} must hold exactly \"name\" and \"email\"; set it again with {SET_COMMAND}")
    return parse_author(f"{data['name']} <{data['email']}>", str(path))


def author_of_record(project: Project) -> Tuple[Author, str]:
    """(the author exports name, where it comes from): patches/author.json when a maintainer set
    one, else the series' own identity of patches/identity.json, which the patches carry."""
    if author_file(project).is_file():
        return series_author(project), "patches/author.json"
    ident = identity(project)
    return Author(ident["name"], ident["email"]), "patches/identity.json; set another with 'patchset author set'"


def author_line(author: Author, source: str) -> str:
    return f"author: {author} ({source})"


def set_series_author(project: Project, text: str) -> Author:
    author = parse_author(text, "the series author")
    write_text_atomic(author_file(project),
                      json.dumps({"name": author.name, "email": author.email}, indent=2) + "\n")
    return author
