"""`pvgpud --version`: the release a bug report names, beside the protocol
version the daemon speaks.

The release is the packages' version (debian/version.sh: from git, else the
top entry of debian/changelog where the tree is no git checkout), which the
Makefile passes into pvgpud once as PVGPU_VERSION.
"""

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BUILD = REPO / os.environ.get("PVGPU_BUILD", "build")
PVGPUD = BUILD / "bin" / "pvgpud"
VERSION_SH = REPO / "debian" / "version.sh"

LINE = re.compile(r"^pvgpud (?P<release>[0-9][0-9A-Za-z.+~]*) "
                  r"\(protocol (?P<protocol>\d+)\), built with:(?P<parts>( \w+)*)$")


def no_git_env():
    """The environment without any GIT_* variable, which could point git
    at a repository other than the one the script's tree is in."""
    return {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}


def version_sh(tree):
    res = subprocess.run([str(tree / "debian" / "version.sh")], capture_output=True,
                         text=True, env=no_git_env(), timeout=60)
    assert res.returncode == 0, res.stderr
    return res.stdout.strip()


def spec_protocol_version():
    m = re.search(r"^version (\d+)$", (REPO / "protocol" / "ops.spec").read_text(), re.M)
    assert m, "protocol/ops.spec has no version line"
    return int(m.group(1))


def test_version_names_release_and_protocol():
    if not PVGPUD.exists():
        pytest.fail(f"{PVGPUD} is not built (run `make`)")
    res = subprocess.run([str(PVGPUD), "--version"], capture_output=True,
                         text=True, timeout=30)
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert len(lines) == 1, res.stdout
    m = LINE.match(lines[0])
    assert m, f"not 'pvgpud RELEASE (protocol N), built with: ...': {lines[0]!r}"
    assert int(m.group("protocol")) == spec_protocol_version(), lines[0]
    # The package built from this tree would carry the same version.
    # Whether the tree was dirty at build time may differ from now; the
    # commit may not.
    built = m.group("release").removesuffix("+dirty")
    tree = version_sh(REPO).removesuffix("+dirty")
    assert built == tree, (f"pvgpud says {m.group('release')}, this tree is "
                           f"{tree}: pvgpud was built from another commit (run `make`)")


def test_release_without_git_is_the_changelog_top_entry(tmp_path):
    """A tree that is no git checkout (a source tarball, the copy of the
    working tree a GPU machine gets) takes debian/changelog's version, and
    says it does not know where there is none."""
    (tmp_path / "debian").mkdir()
    shutil.copy2(VERSION_SH, tmp_path / "debian" / "version.sh")
    assert version_sh(tmp_path) == "0.0~unknown"
    (tmp_path / "debian" / "changelog").write_text(
        "pvgpu (0.9.0+git12.abcdef0) unstable; urgency=medium\n\n"
        "  * An entry.\n\n"
        " -- pvgpu developers <pvgpu@example.org>  Sat, 28 Nov 2026 10:00:00 +0000\n\n"
        "pvgpu (0.8.0) unstable; urgency=medium\n")
    assert version_sh(tmp_path) == "0.9.0+git12.abcdef0"


def test_release_from_git_names_the_commit():
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("this tree is no git checkout: its release comes from "
                    "debian/changelog (the test above)")
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short=7", "HEAD"],
                          capture_output=True, text=True, env=no_git_env(),
                          timeout=60).stdout.strip()
    release = version_sh(REPO)
    # A tagged commit is its tag alone; any other names its commit.
    assert re.fullmatch(r"[0-9][0-9A-Za-z.+~]*", release), release
    assert "git" not in release or head in release, \
        f"{release} does not name HEAD {head}"
