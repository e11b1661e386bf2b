"""pvgpu's libnvidia-ml.so.1: pynvml (NVIDIA's
nvidia-ml-py, unmodified) and an nvidia-smi-style view see the virtual GPUs
of a pvgpud running the sim executor, as the caller's VM sees them.

What is covered: the device count, names, UUIDs, PCI bus ids and ids,
compute capability, handles by index, UUID and bus id, memory total = the
VM's quota and used growing when another process of the same VM allocates
(and not when another VM does), the VM's processes, nvmlInit without a
backend, the exported surface (every nvml* function nvml.h declares) and
NOT_SUPPORTED for what pvgpu does not forward.  Not covered here: the
host's driver version (the sim host has no NVIDIA module: N/A) and
utilisation under load (tests/gpu/test_gpu_nvml.py compares with native).

No NVIDIA libnvidia-ml.so.1 is on this machine's library path (checked),
the view reports which libnvidia-ml.so.1 it loaded, and pvgpud's log shows
its session: nothing passes by reaching NVIDIA's.
"""
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
from pvgpu_asan import asan_runtime  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
BUILD = REPO / os.environ.get("PVGPU_BUILD", "build")
sys.path.insert(0, str(REPO / "tests" / "lib"))
sys.path.insert(0, str(REPO / "protocol" / "api"))
import pvgpu_wire as W  # noqa: E402
from pvgpu_sessions import tcp_session, unix_session, wait_live  # noqa: E402

LIBNVML = BUILD / "lib" / "libnvidia-ml.so.1"
VIEW = REPO / "tests" / "lib" / "nvml_view.py"
MiB = 1 << 20
BOB_TOKEN = "bob-nvml-5e1d"
NVML_ERROR_NOT_SUPPORTED = 3

pytestmark = pytest.mark.skipif(
    not LIBNVML.exists(),
    reason=f"{LIBNVML} not built (make leaves it out without libclang or nvml.h)")


def have_pynvml():
    try:
        import pynvml  # noqa: F401
    except ImportError:
        return False
    return True


needs_pynvml = pytest.mark.skipif(
    not have_pynvml(), reason="pynvml (pip nvidia-ml-py) is not installed: "
    "scripts/install-deps.sh installs it")


def nvml_env(uri, debug=False):
    """pvgpu's build/lib first on the path, PVGPU_DEVICES=uri."""
    env = dict(os.environ)
    for var in ("PVGPU_DEVICES", "PVGPU_TOKEN", "PVGPU_DEBUG"):
        env.pop(var, None)
    old = env.get("LD_LIBRARY_PATH")
    env["LD_LIBRARY_PATH"] = str(BUILD / "lib") + (":" + old if old else "")
    env["PVGPU_DEVICES"] = uri
    asan = asan_runtime(LIBNVML)
    if asan:	# the sanitizer build; python itself leaks by design
        env["LD_PRELOAD"] = asan
        env["ASAN_OPTIONS"] = "detect_leaks=0:allocator_may_return_null=1"
    if debug:
        env["PVGPU_DEBUG"] = "1"
    return env


@pytest.fixture
def vms(start_pvgpud, tmp_path):
    """pvgpud (sim, two GPUs of 256 MiB) with a policy: alice (this uid)
    has a 64 MiB quota, bob (a TCP token) 32 MiB."""
    path = tmp_path / "pvgpud.conf"
    path.write_text(textwrap.dedent(f"""
        [default]
        policy = refuse

        [vm alice]
        uid = {os.getuid()}
        memory = 64M

        [vm bob]
        token = {BOB_TOKEN}
        memory = 32M
        """))
    daemon = start_pvgpud("sim", extra_args=["--config", str(path)],
                          env={"PVGPU_SIM_DEVICES": "2",
                               "PVGPU_SIM_MEMORY_MB": "256"})
    wait_live(daemon)
    return daemon


class View:
    """nvml_view.py --json --repeat under pvgpu: one NVML session, viewed
    again on each .next()."""

    def __init__(self, daemon):
        self.proc = subprocess.Popen(
            [sys.executable, str(VIEW), "--json", "--repeat"],
            env=nvml_env(daemon.unix), stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            cwd=REPO)
        self.daemon = daemon

    def read(self):
        line = self.proc.stdout.readline()
        if not line:
            self.proc.kill()
            raise AssertionError("nvml_view.py ended: %s\n%s" % (
                self.proc.stderr.read(), self.daemon.log()[-3000:]))
        return json.loads(line)

    def next(self):
        self.proc.stdin.write("\n")
        self.proc.stdin.flush()
        return self.read()

    def close(self):
        self.proc.stdin.close()
        assert self.proc.wait(timeout=60) == 0, self.proc.stderr.read()


def wire_devices(daemon):
    """Names and UUIDs as the backend gives them over the wire."""
    s = W.Session(daemon.unix)
    count = s.hello()["device_count"]
    out = []
    for d in range(count):
        st, _, name, _ = s.call("device_get_name", device=d)
        assert st == 0
        st, _, uuid, _ = s.call("device_get_uuid", device=d)
        assert st == 0
        u = uuid["uuid"].hex()
        out.append((name["name"].decode(), "GPU-%s-%s-%s-%s-%s" % (
            u[:8], u[8:12], u[12:16], u[16:20], u[20:])))
    s.close()
    return out


def test_no_nvidia_nvml_on_the_library_path():
    found = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True)
    assert "libnvidia-ml" not in found.stdout, found.stdout
    for d in os.environ.get("LD_LIBRARY_PATH", "").split(":"):
        assert not d or not list(Path(d).glob("libnvidia-ml.so*")), d


@needs_pynvml
def test_pynvml_sees_the_virtual_gpus_and_the_quota(vms):
    expected = wire_devices(vms)
    assert len(expected) == 2
    view = View(vms)
    v = view.read()
    assert v["library"] == str(LIBNVML.resolve()), v["library"]
    assert v["count"] == 2
    assert v["cuda"] >= 13000
    assert v["driver"] is None		# the sim host has no NVIDIA module
    for i, d in enumerate(v["devices"]):
        assert (d["name"], d["uuid"]) == expected[i]
        assert d["by_uuid"] == i and d["by_bus_id"] == i and d["minor"] == i
        assert d["compute_capability"] == [9, 0]
        assert d["pci_device_id"] == 0x233010de
        # The VM's quota is its GPU, not the device's 256 MiB.
        assert d["memory"] == {"total": 64 * MiB, "used": 0, "free": 64 * MiB}
        assert d["memory_v2"] == d["memory"]
        assert d["processes"] == []
    assert len({d["uuid"] for d in v["devices"]}) == 2
    assert len({d["bus_id"] for d in v["devices"]}) == 2

    # Another process of the same VM (this one: same uid) allocates.
    a = unix_session(vms)
    st, _, out, _ = a.call("mem_alloc", size=8 * MiB)
    assert st == 0
    v = view.next()
    d0 = v["devices"][0]
    assert d0["memory"] == {"total": 64 * MiB, "used": 8 * MiB, "free": 56 * MiB}
    assert d0["processes"] == [{"pid": os.getpid(), "used": 8 * MiB}]
    # A quota is over all the VM's GPUs, as cuMemGetInfo reports it.
    assert v["devices"][1]["memory"]["used"] == 8 * MiB
    assert v["devices"][1]["processes"] == []

    # Another VM's memory and processes are not this VM's.
    b = tcp_session(vms, BOB_TOKEN)
    assert b.call("mem_alloc", size=4 * MiB)[0] == 0
    v = view.next()
    assert v["devices"][0]["memory"]["used"] == 8 * MiB
    assert v["devices"][0]["processes"] == [{"pid": os.getpid(), "used": 8 * MiB}]

    assert a.call("mem_free", dptr=out["dptr"])[0] == 0
    v = view.next()
    assert v["devices"][0]["memory"]["used"] == 0
    view.close()
    a.close()
    b.close()
    # The view reached pvgpud: its session is in the log, as alice's.
    log = vms.log()
    assert "hello from 'python" in log, log[-2000:]
    assert "vm alice" in log


@needs_pynvml
def test_the_table_view(vms):
    res = subprocess.run([sys.executable, str(VIEW)], env=nvml_env(vms.unix),
                         capture_output=True, text=True, timeout=60, cwd=REPO)
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert lines[0].startswith("Driver Version: N/A    CUDA Version: 13.")
    assert "pvgpu simulated device" in lines[1] and "0 MiB /    64 MiB" in lines[1]


def run_ctypes(daemon_uri, code, debug=False):
    """A small program calling the library through ctypes directly."""
    prog = textwrap.dedent("""
        import ctypes, sys
        lib = ctypes.CDLL("libnvidia-ml.so.1")
        """) + textwrap.dedent(code)
    return subprocess.run([sys.executable, "-c", prog],
                          env=nvml_env(daemon_uri, debug), capture_output=True,
                          text=True, timeout=60, cwd=REPO)


def test_unsupported_call_says_not_supported(vms):
    res = run_ctypes(vms.unix, """
        assert lib.nvmlInit_v2() == 0
        h = ctypes.c_void_p()
        assert lib.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(h)) == 0
        t = ctypes.c_uint()
        print(lib.nvmlDeviceGetTemperature(h, 0, ctypes.byref(t)))
        lib.nvmlErrorString.restype = ctypes.c_char_p
        print(lib.nvmlErrorString(3).decode())
        assert lib.nvmlShutdown() == 0
        assert lib.nvmlShutdown() == 1     # NVML_ERROR_UNINITIALIZED
        """, debug=True)
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines() == [
        str(NVML_ERROR_NOT_SUPPORTED),
        "The requested operation is not available on target device"]
    assert "nvmlDeviceGetTemperature: not supported by pvgpu" in res.stderr


def test_init_without_a_backend(tmp_path):
    res = run_ctypes("unix://%s/none.sock" % tmp_path, """
        print(lib.nvmlInit_v2(), lib.nvmlInitWithFlags(1))
        """)
    assert res.returncode == 0, res.stderr
    # NVML_ERROR_DRIVER_NOT_LOADED, with or without NVML_INIT_FLAG_NO_GPUS
    assert res.stdout.split() == ["9", "9"]


def nvml_include():
    """Where the build finds nvml.h (guest-lib/nvml/nvml.mk's order): the
    CUDA toolkit's include directory, else NVIDIA's nvidia-nvml-dev wheel."""
    cuda = subprocess.run([str(REPO / "scripts" / "find-cuda.sh")],
                          capture_output=True, text=True).stdout.strip()
    for d in (Path(cuda) / "include" if cuda else None,
              REPO / ".deps" / "nvml-py" / "nvidia" / "cu13" / "include"):
        if d and (d / "nvml.h").exists():
            return str(d)
    return None


def test_every_declared_function_is_exported():
    try:
        import header
    except ImportError as e:
        pytest.skip("no libclang: %s" % e)
    include = nvml_include()
    assert include, "no nvml.h, yet libnvidia-ml.so.1 was built"
    h = header.parse(include, "#include <nvml.h>\n",
                     defines=["NVML_NO_UNVERSIONED_FUNC_DEFS"],
                     prefixes=("nvml",), who="test")
    declared = set(h.funcs)
    # The versioned names its #defines upgrade callers to are declared too.
    renamed = header.renames(str(Path(include, "nvml.h")), "nvml")
    assert {"nvmlInit_v2", "nvmlDeviceGetCount_v2", "nvmlDeviceGetPciInfo_v3",
            "nvmlDeviceGetComputeRunningProcesses_v3"} <= declared
    assert renamed["nvmlInit"] == "nvmlInit_v2"
    nm = subprocess.run(["nm", "-D", "--defined-only", str(LIBNVML)],
                        capture_output=True, text=True, check=True)
    exported = {line.split()[-1] for line in nm.stdout.splitlines()
                if line.split() and line.split()[1] == "T"}
    missing = declared - exported
    assert not missing, sorted(missing)
    assert {"nvmlGetBlacklistDeviceCount", "nvmlGetExcludedDeviceCount"} <= exported
    # Nothing but NVML's names: the client's own symbols stay inside.
    assert all(n.startswith("nvml") for n in exported), \
        sorted(n for n in exported if not n.startswith("nvml"))


def test_device_usage_checks_what_the_guest_sends(vms):
    """The backend half: a device index out of range is refused, and a
    session sees its own VM's figures only."""
    s = W.Session(vms.unix)
    s.hello()
    for bad in (-1, 2, 16, 1 << 30, -(1 << 31)):
        assert s.call("device_usage", device=bad)[0] == 101   # INVALID_DEVICE
    st, _, out, _ = s.call("device_usage", device=1)
    assert st == 0
    assert (out["total"], out["used"], out["pids"], out["pid_mem"]) == (64 * MiB, 0, [], [])
    st, _, out, _ = s.call("host_driver_version")
    assert st == 0 and out["version"] == b""
    s.close()


def test_driver_580_names_are_exported():
    """Once the lead adds protocol/api/libnvidia-ml580.nm (nm -D of driver
    580's libnvidia-ml.so.1), every nvml* name in it is exported."""
    nm580 = REPO / "protocol" / "api" / "libnvidia-ml580.nm"
    if not nm580.exists():
        pytest.skip("protocol/api/libnvidia-ml580.nm not there yet")
    want = {w.split()[-1].split("@")[0] for w in nm580.read_text().splitlines()
            if w.strip() and w.split()[-1].startswith("nvml")}
    nm = subprocess.run(["nm", "-D", "--defined-only", str(LIBNVML)],
                        capture_output=True, text=True, check=True)
    have = {line.split()[-1] for line in nm.stdout.splitlines() if line.strip()}
    assert want <= have, sorted(want - have)[:20]
