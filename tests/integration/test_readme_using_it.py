"""README's "Using it" block works when pasted, line by line, on a machine
without a GPU: pvgpud on the simulated device, a kernel-launching program
through pvgpu's libcuda.so.1, its result printed, and pvgpud's log naming
the session that served it (so the program did not reach a GPU some other
way)."""
import os
import re
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent.parent
README = REPO / "README.md"


def using_it_block():
    """The first ```sh block under "## Using it"."""
    text = README.read_text()
    section = text.split("\n## Using it\n", 1)
    assert len(section) == 2, "README has no '## Using it' section"
    block = re.search(r"```sh\n(.*?)```", section[1], re.S)
    assert block, "README's 'Using it' has no ```sh block"
    return block.group(1)


@pytest.mark.plain_build("the README's commands name build/; the sanitizer build "
                         "runs the same programs in the other tests")
def test_using_it_block_runs_a_kernel_through_pvgpu(tmp_path):
    block = using_it_block()
    lines = [l for l in block.splitlines() if l.strip()]
    # `make deps` and `make` are what `make test` has done already; the
    # rest is run as written, but for the socket's folder, which is the
    # test's own so that runs beside it do not meet.
    setup = [l for l in lines if l.split("#")[0].split() in (["make", "deps"], ["make"])]
    assert len(setup) == 2, f"expected `make deps` and `make` first:\n{block}"
    rest = "\n".join(l for l in lines if l not in setup)
    socks = set(re.findall(r"unix://(/\S+\.sock)", rest))
    assert len(socks) == 1, f"one socket path expected in:\n{rest}"
    sock = socks.pop()
    script = rest.replace(sock, str(tmp_path / "pvgpu.sock"))
    assert "--executor sim" in script, "the block's first path is the no-GPU one"
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PVGPU_", "LD_"))}
    res = subprocess.run(["bash", "-e", "-c", "set -m\n" + script + "\nwait"],
                         cwd=REPO, env=env, capture_output=True, text=True,
                         timeout=120)
    out = res.stdout + res.stderr
    assert res.returncode == 0, f"{script}\n---\n{out}"
    # The program's own verdict, then pvgpud's account of the session.
    assert re.search(r"^PASS$", res.stdout, re.M), out
    assert re.search(r"session \d+ start:", res.stderr), out
    assert re.search(r"session \d+ end:", res.stderr), out
    assert "CPU twins of" in res.stderr, out
