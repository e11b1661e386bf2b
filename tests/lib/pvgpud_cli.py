"""pvgpud started the way an operator starts it, to see what it refuses:
its exit code and what it said."""
import os
import subprocess
from pathlib import Path

BUILD = Path(__file__).resolve().parents[2] / os.environ.get("PVGPU_BUILD", "build")
PVGPUD = BUILD / "bin" / "pvgpud"


def require_policy_file():
    """Skip, saying why, where pvgpud cannot read a policy file (built
    without inih, as on a GPU host without a package registry)."""
    import pytest
    version = subprocess.run([str(PVGPUD), "--version"], capture_output=True,
                             text=True).stdout
    if " inih" not in version:
        pytest.skip("pvgpud was built without inih (libinih-dev): no policy file, "
                    "no VMs or quotas; build with make INIH_DIR=DIR (README)")


def run_pvgpud(args, cwd=None, seconds=5):
    """pvgpud --executor sim ARGS: (exit code, stderr); the code is None
    when it was still running after `seconds` (it took the arguments and
    started; it is killed then)."""
    proc = subprocess.Popen([str(PVGPUD), "--executor", "sim", *args], cwd=cwd,
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, errors="replace")
    try:
        _, err = proc.communicate(timeout=seconds)
        return proc.returncode, err
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
        return None, err


def assert_refused(code, err, want, *said):
    """Exited `want` with one line on stderr that says each of `said`."""
    assert code == want, f"exit {code}, stderr:\n{err}"
    lines = err.splitlines()
    assert len(lines) == 1, err
    for what in said:
        assert what in lines[0], lines[0]


def assert_vm_key_refused(tmp_path, key, values, said):
    """pvgpud --config with a [vm] whose `key` is each of values exits 1
    with one line saying said (formatted with the value)."""
    path = tmp_path / "bad.conf"
    for value in values:
        path.write_text(f"[vm alice]\nuid = 0\n{key} = {value}\n")
        code, err = run_pvgpud(["--listen", f"unix://{tmp_path}/s.sock",
                                "--config", str(path)])
        assert_refused(code, err, 1, said.format(value))
