"""On the GPU: VMs sharing one H100 through one
pvgpud --config.  A VM over its quota gets out-of-memory while another VM's
program runs to correct results; a VM whose kernel faults leaves another
VM's results correct.  VMs are told apart by their TCP tokens, as the
policy file says.  Their programs run as a VM's do: NVIDIA's runtime over
pvgpu's libcuda.so.1 (programs.pvgpu_env)."""
import os
import subprocess
import sys
import textwrap

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
import pvgpu_wire as W  # noqa: E402
from pvgpud_cli import require_policy_file  # noqa: E402

from curesult import CUDA_ERROR_OUT_OF_MEMORY  # noqa: E402
MiB = 1 << 20
POLICY = """\
[default]
policy = refuse

[vm small]
token = small-vm-token
memory = 1G

[vm big]
token = big-vm-token
memory = 16G
"""


def tenants(start_pvgpud, tmp_path):
    require_policy_file()
    conf = tmp_path / "pvgpud.conf"
    conf.write_text(textwrap.dedent(POLICY))
    return start_pvgpud("cuda", extra_args=["--config", str(conf)])


def vm_env(programs, daemon, token):
    env = programs.pvgpu_env(daemon.tcp)
    env["PVGPU_TOKEN"] = token
    return env


def test_a_vm_over_quota_gets_oom_while_another_runs(programs, start_pvgpud, tmp_path):
    daemon = tenants(start_pvgpud, tmp_path)
    small = W.Session(daemon.tcp)
    small.hello(token="small-vm-token")
    small.open_context()
    big = subprocess.Popen([str(programs.path("kernels/streams4"))],
                           env=vm_env(programs, daemon, "big-vm-token"),
                           stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, errors="replace")
    try:
        st, _, out, _ = small.call("mem_alloc", size=200 * MiB)
        assert st == 0
        # Past its 1 GiB (its context charged too): out of memory for
        # this VM, on a GPU with 80 GB.
        assert small.call("mem_alloc", size=900 * MiB)[0] == CUDA_ERROR_OUT_OF_MEMORY
        st, _, info, _ = small.call("mem_get_info")
        assert st == 0 and info["total"] == 1024 * MiB
        assert info["free"] <= 824 * MiB
        # Its own memory still works.
        data = bytes(range(256)) * 4096
        assert small.call("memcpy_htod", dst=out["dptr"], size=len(data), data_in=data)[0] == 0
        st, _, _, back = small.call("memcpy_dtoh", src=out["dptr"], size=len(data))
        assert st == 0 and back == data
        outs, errs = big.communicate(timeout=programs.timeout)
    finally:
        if big.poll() is None:
            big.kill()
            big.communicate()
    res = subprocess.CompletedProcess(big.args, big.returncode, outs, errs)
    programs.assert_passed(res, daemon)


def test_a_vm_whose_kernel_faults_leaves_another_vms_results_correct(programs, start_pvgpud,
                                                                     tmp_path):
    daemon = tenants(start_pvgpud, tmp_path)
    busy = subprocess.Popen([str(programs.path("kernels/matmul"))],
                            env=vm_env(programs, daemon, "big-vm-token"),
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, errors="replace")
    try:
        fault = programs.run("kernels/fault", vm_env(programs, daemon, "small-vm-token"))
        programs.assert_passed(fault, daemon)
        assert "cudaErrorIllegalAddress" in fault.stdout
        out, err = busy.communicate(timeout=programs.timeout)
    finally:
        if busy.poll() is None:
            busy.kill()
            busy.communicate()
    programs.assert_passed(subprocess.CompletedProcess(busy.args, busy.returncode, out, err),
                           daemon)
    log = daemon.log()
    assert "vm small" in log and "vm big" in log
