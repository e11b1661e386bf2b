"""Comments say why, in words a reader of this tree can follow: none cites
"issue N" of a tracker that lives outside the repository.  A reader has
only the tree (and its history), so such a number explains nothing; say
what the reference stood for instead (the feature, the bug, the reason).

Every source file of the tree (git's list where there is one, else a walk
that skips build*/ and .deps/) is searched; a hit fails naming file:line.
"""
import fnmatch
import os
import re
import subprocess

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SELF = os.path.relpath(os.path.abspath(__file__), REPO)

PATTERN = re.compile(r"issues?[ _]?[0-9]", re.IGNORECASE)
GLOBS = ("*.c", "*.h", "*.py", "*.cu", "*.mk", "*.sh", "Makefile")
SKIP_DIRS = (".deps", ".git")


def skipped(rel):
    top = rel.split("/", 1)[0]
    return top.startswith("build") or top in SKIP_DIRS


def source_files():
    try:
        out = subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others",
             "--exclude-standard"],
            cwd=REPO, capture_output=True, check=True, timeout=60).stdout
        paths = [p for p in out.decode("utf-8", "replace").split("\0") if p]
    except (OSError, subprocess.SubprocessError):
        paths = []
        for root, dirs, files in os.walk(REPO):
            rel_root = os.path.relpath(root, REPO)
            dirs[:] = [d for d in dirs
                       if not skipped(os.path.normpath(os.path.join(rel_root, d)))]
            for name in files:
                paths.append(os.path.normpath(os.path.join(rel_root, name)))
    for rel in paths:
        rel = rel.replace(os.sep, "/")
        name = rel.rsplit("/", 1)[-1]
        if skipped(rel) or rel == SELF:
            continue
        if any(fnmatch.fnmatchcase(name, g) for g in GLOBS):
            yield rel


def test_no_issue_numbers_in_sources():
    hits = []
    for rel in source_files():
        path = os.path.join(REPO, rel)
        if not os.path.isfile(path):
            continue        # listed by git but deleted in the work tree
        with open(path, encoding="utf-8", errors="replace") as f:
            for n, line in enumerate(f, 1):
                if PATTERN.search(line):
                    hits.append(f"{rel}:{n}: {line.strip()}")
    assert not hits, (
        "comments cite an issue number; say what it stood for instead:\n"
        + "\n".join(hits))
