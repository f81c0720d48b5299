"""kperf's folders are kperf's alone.

Under KPERF_HOME kperf keeps the mirror of every submitted tree (with every
user's unpublished patch series), the build trees, ccache and the
artifacts. Made with a login's usual umask (022) they were readable by
every local account. The home and the folders kperf makes in it are mode
0700; the home alone is enough to keep other accounts out of all of it,
the others keep it so when an operator points one elsewhere.

The build sandbox needs nothing more: bubblewrap, as root or as kperf's
own user, mounts a build's checkout, object tree, scratch and ccache into
the build's view, so the build uid never walks the paths under the home
(kperf_kbuild.sandbox).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

PRIVATE = 0o700


def private_dir(path: Path) -> Path:
    """`path` as a folder only its owner may read or enter: made so, or, when it is kperf's
    already (an older kperf's, made world-readable), its group and other bits taken away."""
    path.mkdir(mode=PRIVATE, parents=True, exist_ok=True)
    st = path.stat()
    # A folder someone else owns (an operator's shared mount) is theirs to set.
    if st.st_uid == os.geteuid() and st.st_mode & 0o077:
        path.chmod(stat.S_IMODE(st.st_mode) & ~0o077)
    return path


def private_dirs(home: Path, *roots: Path) -> None:
    """The home private, and each of `roots` that lies in it (kperf's own; one elsewhere is the operator's)."""
    private_dir(home)
    for root in roots:
        if root.resolve().is_relative_to(home.resolve()):
            private_dir(root)
