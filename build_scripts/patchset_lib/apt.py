"""Debian packages: which are installed (dpkg), and installing the missing ones (apt-get, as root)."""
from __future__ import annotations

import os
from typing import Dict, List, Sequence

from .common import PatchsetError, Runner, quiet


def dpkg_versions(runner: Runner, names: Sequence[str]) -> Dict[str, str]:
    """name -> version of the packages dpkg reports as installed (`ii`)."""
    proc = quiet(runner).run(
        ["dpkg-query", "-W", "-f=${Package} ${db:Status-Abbrev} ${Version}\n", *names],
        check=False, capture=True,
    )
    found: Dict[str, str] = {}
    for line in proc.stdout.splitlines():
        parts = line.split()
        if len(parts) >= 3 and parts[1] == "ii":
            found[parts[0].split(":")[0]] = parts[-1]
    return found


def missing_apt_packages(runner: Runner, groups: Sequence[Sequence[str]]) -> List[str]:
    """Each group: acceptable package names, the first being the one to install."""
    wanted = [name for group in groups for name in group]
    present = dpkg_versions(runner, wanted)
    return [group[0] for group in groups if not any(name in present for name in group)]


def install_apt_packages(runner: Runner, packages: Sequence[str]) -> None:
    if os.geteuid() != 0:
        raise PatchsetError(f"missing apt packages {' '.join(packages)}: run setup as root, "
                            f"or `apt-get install {' '.join(packages)}`")
    env = {"DEBIAN_FRONTEND": "noninteractive"}
    print(f"setup: installing apt packages: {' '.join(packages)}", flush=True)
    runner.run(["apt-get", "update"], env=env)
    runner.run(["apt-get", "install", "-y", "--no-install-recommends", *packages], env=env)
