"""Import hook that makes the patch-set overlay the modules `import torch` loads in a venv.

`install` copies this file into the venv's site-packages as `patchset_overlay.py`, with a
`patchset_overlay.pth` that imports it at start-up, and fills OVERLAY_ROOT and MODULES below.
Nothing of torch is copied or touched: only the listed submodules are loaded from the overlay,
everything else (and torch/lib's shared objects) still comes from the installed torch. A listed
package (its `__init__.py` in the overlay) keeps the installed package's directory as its
search path, so its other submodules still come from the installed torch.
Set PATCHSET_OVERLAY=0 to run the same venv against the unpatched torch.
"""
import importlib.abc
import importlib.util
import os
import sys

OVERLAY_ROOT = None  # filled in by `patchset install`
MODULES = ()  # dotted names, filled in by `patchset install`


class OverlayFinder(importlib.abc.MetaPathFinder):
    def __init__(self, root, modules):
        self.root = root
        self.modules = frozenset(modules)

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in self.modules:
            return None
        parts = fullname.split(".")
        package_init = os.path.join(self.root, *parts, "__init__.py")
        if os.path.isfile(package_init):
            # `path` is the parent package's search path: the installed torch's directories
            search = [os.path.join(entry, parts[-1]) for entry in (path or ())]
            return importlib.util.spec_from_file_location(
                fullname, package_init, submodule_search_locations=search)
        location = os.path.join(self.root, *parts) + ".py"
        return importlib.util.spec_from_file_location(fullname, location)


def activate():
    if os.environ.get("PATCHSET_OVERLAY", "1") == "0" or not OVERLAY_ROOT:
        return
    if any(isinstance(f, OverlayFinder) for f in sys.meta_path):
        return
    sys.meta_path.insert(0, OverlayFinder(OVERLAY_ROOT, MODULES))


activate()
