"""pvgpud --registry: the VMs qemu-device attached a vGPU to.

The registry entries and window files are made by the real writer,
`pvgpu-vm qemu-args`, exactly as an operator's would be.  The test then
plays each VM: it connects where vhost-device-vsock would (the VM's
`vsock.listen` socket) and maps the window file as the guest's BAR2 would
be.  What the VM is comes from the socket it came through, and a VM can
name only its own window.
"""
import mmap
import os
import socket
import stat
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
import pvgpu_wire as W  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
PVGPU_VM = REPO / "qemu-device" / "pvgpu-vm"
sys.path.insert(0, str(REPO / "qemu-device"))
from pvgpuvm import registry as registry_mod  # noqa: E402

from curesult import (  # noqa: E402
    CUDA_ERROR_INVALID_VALUE, CUDA_ERROR_OUT_OF_MEMORY)
MiB = 1 << 20
WINDOW = 16 * MiB


@pytest.fixture
def run_dir(short_tmp):
    """qemu-device's run directory: short, for Unix socket paths."""
    return short_tmp


@pytest.fixture
def vms(run_dir):
    """register(name, memory) -> the registry entry; windows removed after."""
    names = []

    def register(name, memory="64M"):
        vm = f"t{os.getpid()}-{name}"
        names.append(vm)
        proc = subprocess.run([str(PVGPU_VM), "--run-dir", str(run_dir), "qemu-args", vm,
                               "--vsock", "vhost-user", "--window-size", "16M",
                               "--memory", memory],
                              capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, proc.stderr
        return registry_mod.Registry(str(run_dir / "vms")).load(vm)

    yield register
    for vm in names:
        subprocess.run([str(PVGPU_VM), "--run-dir", str(run_dir), "release", vm],
                       capture_output=True, timeout=60)


def wait_log(daemon, text, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if text in daemon.log():
            return
        time.sleep(0.05)
    raise AssertionError(f"{text!r} not in the log:\n{daemon.log()[-3000:]}")


def listen_path(entry):
    return f"{entry.vsock.uds_path}_{entry.vsock.port}"


def vm_session(entry):
    s = W.Session("unix://" + listen_path(entry))
    s.hello()
    s.open_context()
    return s


def attach_by_id(s, window_id, size=WINDOW):
    return s.call("window_attach", size=size, window_id=window_id)[0]


def map_window(entry):
    fd = os.open(entry.window_path, os.O_RDWR)
    try:
        return mmap.mmap(fd, entry.layout.size)
    finally:
        os.close(fd)


def arena_offset(entry):
    lay = entry.layout
    return lay.staging_offset + lay.slot_size * lay.nslots


@pytest.fixture
def daemon(start_pvgpud, run_dir):
    d = start_pvgpud("sim", extra_args=["--registry", str(run_dir / "vms")])
    return d


def test_a_vm_is_known_by_the_socket_it_came_through(daemon, vms):
    web = vms("web", memory="64M")
    wait_log(daemon, f"registry: vm {web.vm} attached")
    path = listen_path(web)
    wait_log(daemon, path)
    # Only vhost-device-vsock (root, or pvgpud's own user) may connect.
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    s = vm_session(web)
    # The VM sees its quota, not the device.
    st, _, out, _ = s.call("mem_get_info")
    assert st == 0 and out["total"] == 64 * MiB
    assert s.call("mem_alloc", size=80 * MiB)[0] == CUDA_ERROR_OUT_OF_MEMORY
    s.call("bye")
    s.close()
    wait_log(daemon, f"vm {web.vm} via vhost-user")
    assert f", vm {web.vm} (worker pid" in daemon.log()


def test_the_window_is_named_by_its_id_and_carries_data(daemon, vms):
    web = vms("win")
    wait_log(daemon, f"registry: vm {web.vm} attached")
    s = vm_session(web)
    m = map_window(web)
    assert attach_by_id(s, web.layout.window_id) == 0
    st, _, out, _ = s.call("mem_alloc", size=MiB)
    dptr = out["dptr"]
    base = arena_offset(web)
    pattern = bytes((i * 13) & 0xFF for i in range(MiB))
    m[base:base + MiB] = pattern
    assert s.call("memcpy_htod_window", dst=dptr, offset=base, size=MiB, stream=0)[0] == 0
    m[base:base + 2 * MiB] = bytes(2 * MiB)
    assert s.call("memcpy_dtoh_window", src=dptr, offset=base + MiB, size=MiB, stream=0)[0] == 0
    assert m[base + MiB:base + 2 * MiB] == pattern
    # Offsets outside the window are refused; the session goes on.
    assert s.call("memcpy_dtoh_window", src=dptr, offset=WINDOW - 4096, size=MiB,
                  stream=0)[0] == CUDA_ERROR_INVALID_VALUE
    assert s.call("memcpy_dtoh_window", src=dptr, offset=base, size=16, stream=0)[0] == 0
    m.close()


def test_a_vm_cannot_name_another_window(daemon, vms):
    a, b = vms("a"), vms("b")
    wait_log(daemon, f"registry: vm {b.vm} attached")
    s = vm_session(a)
    # B's window, a wrong size of A's own, an id nobody has: refused.
    assert attach_by_id(s, b.layout.window_id) == CUDA_ERROR_INVALID_VALUE
    assert attach_by_id(s, a.layout.window_id, size=2 * WINDOW) == CUDA_ERROR_INVALID_VALUE
    assert attach_by_id(s, 0x1234) == CUDA_ERROR_INVALID_VALUE
    wait_log(daemon, f"vm {a.vm} has 0x{a.layout.window_id:016x}")
    # ...and its own still works after.
    assert attach_by_id(s, a.layout.window_id) == 0
    # A local process is no VM: it has no window to name.
    local = W.Session(daemon.unix)
    local.hello()
    local.open_context()
    assert attach_by_id(local, a.layout.window_id) == CUDA_ERROR_INVALID_VALUE
    wait_log(daemon, "has no registered window")


def test_two_vms_see_only_their_own_allocations(daemon, vms):
    a, b = vms("x", memory="32M"), vms("y", memory="32M")
    wait_log(daemon, f"registry: vm {b.vm} attached")
    sa, sb = vm_session(a), vm_session(b)
    st, _, out, _ = sa.call("mem_alloc", size=8 * MiB)
    assert st == 0
    ptr = out["dptr"]
    assert sa.call("memcpy_htod", dst=ptr, size=4096, data_in=b"\x5a" * 4096)[0] == 0
    # B's view of its quota is untouched by A's allocation...
    _, _, info_b, _ = sb.call("mem_get_info")
    _, _, info_a, _ = sa.call("mem_get_info")
    assert info_b["free"] == 32 * MiB and info_a["free"] == 24 * MiB
    # ...and A's pointer means nothing in B: no read, no free.
    st, _, _, data = sb.call("memcpy_dtoh", src=ptr, size=4096)
    assert st != 0 and data != b"\x5a" * 4096
    assert sb.call("mem_free", dptr=ptr)[0] != 0
    st, _, _, data = sa.call("memcpy_dtoh", src=ptr, size=4096)
    assert st == 0 and data == b"\x5a" * 4096


def test_a_damaged_window_leaves_the_vm_vsock_only(daemon, vms, run_dir):
    c = vms("c")
    wait_log(daemon, f"registry: vm {c.vm} attached")
    with open(c.window_path, "r+b") as f:
        f.write(struct.pack("<I", 0xDEADBEEF))
    # The writer rewrites the entry: pvgpud reads it again and checks.
    registry_mod.Registry(str(run_dir / "vms")).save(c)
    os.kill(daemon.proc.pid, 1)  # SIGHUP does the same
    wait_log(daemon, f"registry: vm {c.vm} has no usable window (vsock only)")
    s = vm_session(c)
    assert attach_by_id(s, c.layout.window_id) == CUDA_ERROR_INVALID_VALUE
    assert s.call("mem_alloc", size=MiB)[0] == 0


def test_detach_closes_the_vm_socket_and_live_sessions_go_on(daemon, vms, run_dir):
    d = vms("d")
    wait_log(daemon, f"registry: vm {d.vm} attached")
    s = vm_session(d)
    subprocess.run([str(PVGPU_VM), "--run-dir", str(run_dir), "release", d.vm],
                   check=True, capture_output=True, timeout=60)
    wait_log(daemon, f"registry: vm {d.vm} detached")
    assert not os.path.exists(listen_path(d))
    with pytest.raises(OSError):
        vm_session(d)
    assert s.call("mem_alloc", size=MiB)[0] == 0


def test_a_guest_gone_mid_copy_ends_only_its_session(daemon, vms):
    e, f = vms("e"), vms("f")
    wait_log(daemon, f"registry: vm {f.vm} attached")
    se, sf = vm_session(e), vm_session(f)
    st, _, out, _ = se.call("mem_alloc", size=4 * MiB)
    # Half of a 4 MiB copy, then the guest is gone.
    msg = W.message("memcpy_htod", 99, dst=out["dptr"], size=4 * MiB)
    se.send(msg + W.data_frames(bytes(2 * MiB), 99))
    se.sock.shutdown(socket.SHUT_RDWR)
    se.close()
    wait_log(daemon, f"end: vm {e.vm} via vhost-user")
    # The other VM never noticed.
    st, _, out, _ = sf.call("mem_alloc", size=4096)
    assert st == 0
    assert sf.call("memcpy_htod", dst=out["dptr"], size=4096, data_in=b"\x11" * 4096)[0] == 0
    st, _, _, data = sf.call("memcpy_dtoh", src=out["dptr"], size=4096)
    assert st == 0 and data == b"\x11" * 4096


def vsock_bindable(port):
    try:
        s = socket.socket(socket.AF_VSOCK, socket.SOCK_STREAM)
    except (OSError, AttributeError):
        return False
    try:
        s.bind((socket.VMADDR_CID_ANY, port))
        return True
    except OSError:
        return False
    finally:
        s.close()


def test_a_kernel_vsock_vm_gets_a_vsock_listener(daemon, run_dir):
    """With kernel vsock the VM is its CID: pvgpud listens on AF_VSOCK (any
    CID) on the VM's port by itself, or says why it cannot."""
    vm = f"t{os.getpid()}-k"
    port = 20000 + os.getpid() % 20000
    bindable = vsock_bindable(port)
    proc = subprocess.run([str(PVGPU_VM), "--run-dir", str(run_dir), "qemu-args", vm,
                           "--vsock", "kernel", "--window-size", "16M", "--cid", "77",
                           "--port", str(port)], capture_output=True, text=True, timeout=60)
    try:
        assert proc.returncode == 0, proc.stderr
        wait_log(daemon, f"registry: vm {vm} attached: cid 77, kernel vsock")
        if bindable:
            wait_log(daemon, f"listening on vsock://any:{port} for kernel-vsock VMs")
        else:
            wait_log(daemon, f"cannot listen on vsock any:{port}")
    finally:
        subprocess.run([str(PVGPU_VM), "--run-dir", str(run_dir), "release", vm],
                       capture_output=True, timeout=60)
