"""README.md against the programs it describes: the `pvgpud` options table
against `pvgpud --help`, the metrics table against what `/metrics` serves,
and every file of the tree it names.

`pvgpud --help` is the one list of options (host-backend/daemon/main.c's
usage text), so it is checked against the option table main.c parses too.
"""

import os
import re
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from ports import free_tcp_port

REPO = Path(__file__).resolve().parents[2]
BUILD = REPO / os.environ.get("PVGPU_BUILD", "build")
PVGPUD = BUILD / "bin" / "pvgpud"
README = REPO / "README.md"
MAIN_C = REPO / "host-backend" / "daemon" / "main.c"
POLICY_C = REPO / "host-backend" / "daemon" / "policy.c"

OPTION = re.compile(r"(?<![\w-])--[a-z][a-z-]*[a-z]")
# Never through a proxy from the environment: the endpoint is on loopback.
OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def table(header):
    """The rows (lists of cells) of README's table whose header row
    starts with the given cells."""
    lines = README.read_text().splitlines()
    for i, line in enumerate(lines):
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells[:len(header)] == header:
            break
    else:
        pytest.fail(f"README.md has no table headed {header}")
    rows = []
    for line in lines[i + 2:]:      # past the header and the |---| row
        if not line.startswith("|"):
            break
        # "\|" inside a cell is a literal bar, not a column.
        rows.append([c.strip() for c in
                     re.split(r"(?<!\\)\|", line.strip().strip("|"))])
    return rows


def built_with(part):
    if not PVGPUD.exists():
        pytest.fail(f"{PVGPUD} is not built (run `make`)")
    res = subprocess.run([str(PVGPUD), "--version"], capture_output=True,
                         text=True, timeout=30)
    assert res.returncode == 0, res.stderr
    return part in res.stdout.split("built with:", 1)[-1].split()


def help_options():
    if not PVGPUD.exists():
        pytest.fail(f"{PVGPUD} is not built (run `make`)")
    res = subprocess.run([str(PVGPUD), "--help"], capture_output=True,
                         text=True, timeout=30)
    assert res.returncode == 0, res.stderr
    return set(OPTION.findall(res.stdout))


def test_help_lists_every_option_pvgpud_takes():
    accepted = {"--" + name for name in
                re.findall(r'\{\s*"([a-z-]+)",\s*(?:no|required|optional)_argument',
                           MAIN_C.read_text())}
    assert accepted, "no option table found in host-backend/daemon/main.c"
    listed = help_options()
    assert listed == accepted, (
        f"pvgpud --help lacks {sorted(accepted - listed)}; "
        f"names options pvgpud does not take: {sorted(listed - accepted)}")


def test_readme_options_table_is_pvgpud_help():
    documented = set()
    for row in table(["option", "meaning"]):
        found = OPTION.findall(row[0])
        assert found, f"README options row without an option: {row[0]!r}"
        documented.update(found)
    listed = help_options()
    assert documented == listed, (
        f"README's pvgpud options table lacks {sorted(listed - documented)} "
        f"(pvgpud --help lists them); it names {sorted(documented - listed)}, "
        f"which pvgpud --help does not")


def served_families(url):
    """{name: type} from the # TYPE lines of a scrape."""
    deadline = time.monotonic() + 5
    while True:     # the server starts just after the session listeners
        try:
            with OPENER.open(url, timeout=10) as r:
                assert r.status == 200
                text = r.read().decode()
            break
        except urllib.error.URLError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
    return {name: kind for name, kind in
            re.findall(r"^# TYPE (\S+) (\S+)$", text, re.M)}


def test_readme_bounds_table_has_every_limit_the_policy_takes():
    """Every per-VM limit key policy.c parses (its limit_key, plus the
    weight) has its row, with its default, in README's table of bounds,
    and every daemon-wide flag that table names is one pvgpud takes."""
    src = POLICY_C.read_text()
    body = src[src.index("static int limit_key("):]
    body = body[:body.index("\n}\n")]
    keys = set(re.findall(r'strcmp\(key, "(\w+)"\)', body)) | {"weight"}
    assert {"memory", "max_sessions", "handles"} <= keys, keys
    rows = table(["what a tenant can take", "per VM (policy key: default)"])
    named = set()
    for row in rows:
        named |= set(re.findall(r"`(\w+)`: \S", row[1]))
    assert keys == named, (f"limit keys without a row: {sorted(keys - named)}; "
                           f"rows without a key: {sorted(named - keys)}")
    flags = {f for row in rows for f in OPTION.findall(row[2])}
    assert flags and flags <= help_options(), flags - help_options()


def test_readme_metrics_table_is_what_metrics_serves(start_pvgpud):
    if not built_with("metrics"):
        pytest.skip("pvgpud was built without libmicrohttpd (libmicrohttpd-dev; "
                    "`make deps` installs it), so it has no /metrics to compare")
    documented = {}
    for row in table(["metric", "type", "labels", "what"]):
        names = re.findall(r"`(pvgpu_\w+)`", row[0])
        assert names, f"README metrics row without a metric: {row[0]!r}"
        for name in names:
            documented[name] = row[1]
    addr = f"127.0.0.1:{free_tcp_port()}"
    start_pvgpud("sim", extra_args=["--metrics", addr])
    served = served_families(f"http://{addr}/metrics")
    assert served, "GET /metrics served no # TYPE lines"
    assert set(documented) == set(served), (
        f"README's metrics table lacks {sorted(set(served) - set(documented))} "
        f"(GET /metrics serves them); it names "
        f"{sorted(set(documented) - set(served))}, which /metrics does not serve")
    wrong = {n: (documented[n], served[n]) for n in served if documented[n] != served[n]}
    assert not wrong, f"README's type (README, served) differs for {wrong}"


# Paths README names that are no file of the tree on purpose: what a build,
# an install or a running host makes, placeholders, globs.
NOT_IN_TREE = re.compile(
    r"^(build[\w-]*/|\.deps/|/|lib/|[\w-]+/?$)|[<>*]|NAME|DOMAIN")


def in_tree(path):
    """A file of the repository: one outside it is not there for a user
    who has only the repository."""
    full = (REPO / path).resolve()
    return full.is_relative_to(REPO) and full.exists()


def test_readme_names_only_files_that_exist():
    text = README.read_text()
    candidates = set(re.findall(r"`([\w./<>*-]+/[\w./<>*-]*)`", text))
    candidates |= set(re.findall(r"\]\(([\w./-]+)\)", text))
    missing = sorted(p for p in candidates
                     if "://" not in p and not NOT_IN_TREE.search(p)
                     and not in_tree(p))
    assert not missing, f"README.md names files that are not in the repository: {missing}"
