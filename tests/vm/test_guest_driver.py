"""pvgpu.ko in a real guest kernel: Debian's kernel under QEMU TCG with a
busybox initramfs (scripts/vm/pvgpuvm.py).

One boot serves most tests here.  The guest sees five ivshmem-plain
devices, in this order on the PCI bus:

  bad-magic   a header with the wrong magic         -> ignored
  small       a valid header, 16 MiB, window 4241   -> /dev/pvgpu0
  bad-size    a header claiming twice the BAR size  -> ignored
  bad-layout  a header with the next layout          -> ignored
  big         a valid header, 2 GiB, window 4242    -> /dev/pvgpu1

The big BAR does not fit SeaBIOS's 32-bit PCI hole, so SeaBIOS puts every
64-bit BAR above 4 GiB, where its MTRRs leave memory write-back: both
windows are mapped write-back.  A second, shorter boot has one 16 MiB
window, which SeaBIOS puts in the hole; the hole is uncached by MTRR, so the
driver's write-back request comes out uncached-minus, and the driver must
say so.  The window files are sparse: the big one costs a few pages of
/dev/shm.

Inside, the script loads pvgpu.ko and runs pvgpu_vmtest (tests/vm/
pvgpu_vmtest.c, built static here): on pvgpu0 the INFO ioctl, the host's
pattern and a reply; on pvgpu1 all that, a write-back mapping, what must be
refused, and an unbind through sysfs with the file open and mapped.  Then
the script binds pvgpu1 again and unloads the module with both bound.  The
host checks the replies in the window files afterwards.

The second boot also has one ivshmem-doorbell device (a TCG boot costs
about 100 CPU-seconds: one boot serves both), served by the test-only
ivshmem server in scripts/vm/pvgpuvm.py, which answers each doorbell ring
with an MSI-X interrupt: pvgpu_vmtest rings, waits with poll() and read(),
and checks that unbinding wakes a blocked reader.

Skipped, with the reason, where QEMU, the kernel headers, a static busybox
or the Debian kernel package cannot be had.
"""

import os
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest
from vm_script import vm

pytestmark = pytest.mark.vm

REPO = Path(__file__).resolve().parent.parent.parent
BUILD = REPO / os.environ.get("PVGPU_BUILD", "build")
# A bound for a hang, not a speed: alone a boot takes 9 s, but beside
# make test's other passes on two cores one CI run's guest went without
# a turn for over 100 s between two lines of its script.
BOOT_TIMEOUT = float(os.environ.get("PVGPU_VM_TIMEOUT", "600"))

SMALL_SIZE = 16 << 20
SMALL_ID = 4241
WINDOW_SIZE = 2 << 30
WINDOW_ID = 4242
PATTERN_OFF = 1 << 20
REPLY_OFF = 2 << 20
PATTERN_LEN = 64 << 10


def pattern(length, mul, add):
    return bytes((i * mul + add) & 0xFF for i in range(length))


GUEST_SCRIPT = f"""
mount -t debugfs debugfs /sys/kernel/debug
insmod /pvgpu.ko || {{ echo "FAIL: insmod pvgpu.ko"; exit 10; }}
if [ -c /dev/pvgpu0 ]; then echo "ok: /dev/pvgpu0 exists"
else echo "FAIL: no /dev/pvgpu0"; exit 11; fi
if [ -c /dev/pvgpu1 ]; then echo "ok: /dev/pvgpu1 exists"
else echo "FAIL: no /dev/pvgpu1"; exit 11; fi
if [ -e /dev/pvgpu2 ]; then echo "FAIL: /dev/pvgpu2 exists"; exit 12; fi
echo "ok: no /dev/pvgpu2"
for n in 0 1; do
    d=/sys/class/misc/pvgpu$n
    echo "sysfs: pvgpu$n window_id=$(cat $d/window_id) window_size=$(cat $d/window_size) doorbell=$(cat $d/doorbell)"
done
bdf=$(basename "$(readlink /sys/class/misc/pvgpu1/device)")
/pvgpu_vmtest basic /dev/pvgpu0 {SMALL_ID} {PATTERN_OFF} {REPLY_OFF} {PATTERN_LEN} || exit 20
/pvgpu_vmtest full /dev/pvgpu1 {WINDOW_ID} {PATTERN_OFF} {REPLY_OFF} {PATTERN_LEN} || exit 21
echo "$bdf" > /sys/bus/pci/drivers/pvgpu/bind || {{ echo "FAIL: bind again"; exit 22; }}
if [ -c /dev/pvgpu1 ]; then echo "ok: bound again as /dev/pvgpu1"
else echo "FAIL: no /dev/pvgpu1 after binding again"; exit 23; fi
rmmod pvgpu || {{ echo "FAIL: rmmod"; exit 24; }}
echo "ok: rmmod"
if ls /dev/pvgpu* 2>/dev/null; then echo "FAIL: /dev/pvgpu* after rmmod"; exit 25; fi
dmesg | sed 's/^/dmesg: /'
exit 0
"""

DOORBELL_ROUNDS = 20
# The hole and doorbell checks share one boot: a 16 MiB ivshmem-plain window
# and an ivshmem-doorbell device, both small enough for SeaBIOS's 32-bit
# hole.  Each is found by its window id, not by the order of probing.
HOLE_DOORBELL_SCRIPT = f"""
mount -t debugfs debugfs /sys/kernel/debug
insmod /pvgpu.ko || {{ echo "FAIL: insmod pvgpu.ko"; exit 10; }}
for d in /sys/class/misc/pvgpu*; do
    case "$(cat $d/window_id)" in
    {SMALL_ID}) plain=${{d##*/}} ;;
    {WINDOW_ID}) bell=${{d##*/}} ;;
    esac
done
[ -n "$plain" ] && [ -n "$bell" ] || {{ echo "FAIL: no plain or doorbell device"; exit 11; }}
echo "hole: $plain $(basename "$(readlink /sys/class/misc/$plain/device)")"
/pvgpu_vmtest basic /dev/$plain {SMALL_ID} {PATTERN_OFF} {REPLY_OFF} {PATTERN_LEN} || exit 20
echo "sysfs: doorbell=$(cat /sys/class/misc/$bell/doorbell)"
grep -i pvgpu /proc/interrupts | sed 's/^/interrupts: /'
/pvgpu_vmtest doorbell /dev/$bell {WINDOW_ID} 1 {DOORBELL_ROUNDS} || exit 21
rmmod pvgpu || {{ echo "FAIL: rmmod"; exit 24; }}
echo "ok: rmmod"
dmesg | grep -iE 'pvgpu|BUG|WARNING|Oops|Call Trace' | sed 's/^/dmesg: /'
exit 0
"""


def skip_unless_tools():
    if not shutil.which("qemu-system-x86_64"):
        pytest.skip("qemu-system-x86_64 not installed "
                    "(apt-get install qemu-system-x86)")
    try:
        vm.busybox_path()
    except vm.VmError as e:
        pytest.skip(str(e))
    try:
        kver = vm.kernel_version()
    except vm.VmError as e:
        pytest.skip(str(e))
    if not Path(f"/lib/modules/{kver}/build/Makefile").exists():
        pytest.skip(f"no kernel build tree for {kver} "
                    "(apt-get install linux-headers-amd64)")
    try:
        kdir, kver = vm.kernel_dir(kver)
    except vm.VmError as e:
        pytest.skip(f"cannot fetch the guest kernel: {e}")
    return kdir, kver


def build_driver(kver):
    out = BUILD / "guest-driver"
    proc = subprocess.run(
        ["make", "-C", str(REPO / "guest-driver"), f"OUTDIR={out}",
         f"KVER={kver}"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    warnings = [line for line in (proc.stdout + proc.stderr).splitlines()
                if "warning:" in line]
    assert not warnings, "\n".join(warnings)
    return out / "pvgpu.ko"


def build_test_program(dest):
    cc = os.environ.get("CC", "cc")
    proc = subprocess.run(
        [cc, "-std=c11", "-O2", "-Wall", "-Wextra", "-Werror", "-static",
         f"-I{REPO / 'guest-driver'}", f"-I{REPO / 'common'}",
         "-o", str(dest), str(REPO / "tests" / "vm" / "pvgpu_vmtest.c")],
        capture_output=True, text=True)
    if proc.returncode != 0 and "cannot find -lc" in proc.stderr:
        pytest.skip("no static C library (apt-get install libc6-dev)")
    assert proc.returncode == 0, proc.stderr


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory):
    """The kernel, pvgpu.ko and the static test program: built once."""
    kdir, kver = skip_unless_tools()
    tmp = tmp_path_factory.mktemp("vm-build")
    prog = tmp / "pvgpu_vmtest"
    build_test_program(prog)
    return {"kdir": kdir, "kver": kver, "ko": build_driver(kver),
            "prog": prog}


def boot(art, tmp, script, windows, doorbell=None):
    """Boot once.  windows: [(name, size, window_id, make_window kwargs)].

    doorbell: (size, window_id) for one ivshmem-doorbell window served by
    an IvshmemServer; it is named "doorbell" in the replies and its server
    is in the result, closed.

    Each window gets the host pattern at PATTERN_OFF; returns the guest's
    status and console, and what each window holds at REPLY_OFF afterwards.
    """
    shm = Path("/dev/shm") if os.access("/dev/shm", os.W_OK) else tmp
    tag = uuid.uuid4().hex[:8]
    paths = {name: shm / f"pvgpu-test-{tag}-{name}"
             for name, _, _, _ in windows}
    server = None
    extra = []
    try:
        if doorbell:
            paths["doorbell"] = shm / f"pvgpu-test-{tag}-doorbell"
            vm.make_window(paths["doorbell"], doorbell[0], doorbell[1])
            server = vm.IvshmemServer(tmp / "ivshmem.sock",
                                      paths["doorbell"])
            extra = server.qemu_args()
        for name, size, wid, kwargs in windows:
            vm.make_window(paths[name], size, wid, **kwargs)
            with open(paths[name], "r+b") as f:
                f.seek(PATTERN_OFF)
                f.write(pattern(PATTERN_LEN, 7, 3))
        initrd = tmp / "initrd.cpio"
        vm.build_initramfs(initrd, script,
                           files=[(art["ko"], "/pvgpu.ko"),
                                  (art["prog"], "/pvgpu_vmtest")],
                           kdir=art["kdir"], kver=art["kver"])
        cmd = vm.qemu_command(
            initrd, kernel=art["kdir"] / "boot" / f"vmlinuz-{art['kver']}",
            windows=[(paths[name], size) for name, size, _, _ in windows],
            extra=extra)
        log = tmp / "console.log"
        status, console = vm.run(cmd, BOOT_TIMEOUT, log=log, echo=False)
        replies = {}
        for name in paths:
            with open(paths[name], "rb") as f:
                f.seek(REPLY_OFF)
                replies[name] = f.read(2 * PATTERN_LEN)
        return {"status": status, "console": console, "replies": replies,
                "log": log, "server": server}
    finally:
        if server:
            server.close()
        for path in paths.values():
            try:
                path.unlink()
            except FileNotFoundError:
                pass


@pytest.fixture(scope="module")
def guest(artifacts, tmp_path_factory):
    return boot(artifacts, tmp_path_factory.mktemp("vm"), GUEST_SCRIPT, [
        ("bad-magic", SMALL_SIZE, 1, {"magic": 0x12345678}),
        ("small", SMALL_SIZE, SMALL_ID, {}),
        ("bad-size", SMALL_SIZE, 2, {"header_size": 2 * SMALL_SIZE}),
        ("bad-layout", SMALL_SIZE, 3, {"layout": vm.WINDOW_LAYOUT + 1}),
        ("big", WINDOW_SIZE, WINDOW_ID, {}),
    ])


@pytest.fixture(scope="module")
def hole_doorbell_guest(artifacts, tmp_path_factory):
    return boot(artifacts, tmp_path_factory.mktemp("vm-hole-doorbell"),
                HOLE_DOORBELL_SCRIPT, [("small", SMALL_SIZE, SMALL_ID, {})],
                doorbell=(SMALL_SIZE, WINDOW_ID))


def assert_passed(run):
    failures = lines(run["console"], "FAIL: ")
    assert not failures, f"guest failures: {failures}\n(log {run['log']})"
    assert run["status"] == 0, (
        f"guest status {run['status']}; log {run['log']}:\n"
        + "\n".join(run["console"].splitlines()[-40:]))


BAD_DMESG = ("BUG:", "WARNING:", "Oops", "Call Trace",
             "conflicting memory types", "map pfn expected",
             "invalid memtype", "Trying to free nonexistent resource")


def lines(console, prefix):
    return [line[len(prefix):] for line in console.splitlines()
            if line.startswith(prefix)]


def test_guest_checks_pass(guest):
    assert_passed(guest)
    assert "pvgpu_vmtest: all passed" in guest["console"]


def test_info_ioctl_reports_the_windows(guest):
    info = lines(guest["console"], "info: window_id=")
    assert len(info) == 2, "want one INFO line per window"
    layout = vm.WINDOW_LAYOUT
    assert info[0].startswith(f"{SMALL_ID} size={SMALL_SIZE} layout={layout} ")
    assert info[1].startswith(f"{WINDOW_ID} size={WINDOW_SIZE} layout={layout} ")
    for n, (wid, size) in enumerate([(SMALL_ID, SMALL_SIZE),
                                      (WINDOW_ID, WINDOW_SIZE)]):
        assert (f"sysfs: pvgpu{n} window_id={wid} window_size={size} "
                "doorbell=0") in guest["console"]


def test_host_sees_the_guest_writes(guest):
    small, big = guest["replies"]["small"], guest["replies"]["big"]
    assert small[:PATTERN_LEN] == pattern(PATTERN_LEN, 13, 5), \
        "the reply written through pvgpu0 is not in the host file"
    assert big[:PATTERN_LEN] == pattern(PATTERN_LEN, 13, 5), \
        "the reply written through pvgpu1 is not in the host file"
    assert big[PATTERN_LEN:] == pattern(PATTERN_LEN, 11, 1), \
        "the write after unbind is not in the host file"


def test_windows_above_4g_are_write_back(guest):
    console = guest["console"]
    assert "info: /dev/pvgpu0 mapped write-back" in console
    assert "ok: the window is mapped write-back (PAT)" in console
    assert "is uncached, not write-back" not in console


def test_uncached_window_is_reported(hole_doorbell_guest):
    # In SeaBIOS's 32-bit PCI hole, which its MTRRs make uncached.
    assert_passed(hole_doorbell_guest)
    console = hole_doorbell_guest["console"]
    hole = [line.split() for line in lines(console, "hole: ")]
    assert len(hole) == 1 and len(hole[0]) == 2, console[-3000:]
    name, bdf = hole[0]
    assert f"info: /dev/{name} mapped not write-back" in console
    # Once for this window (the doorbell device, in the hole too, has its own).
    warned = [line for line in lines(console, "dmesg: ")
              if "is uncached, not write-back" in line and f" {bdf}: " in line]
    assert len(warned) == 1, lines(console, "dmesg: ")
    assert hole_doorbell_guest["replies"]["small"][:PATTERN_LEN] == \
        pattern(PATTERN_LEN, 13, 5)


def test_wrong_headers_are_left_alone(guest):
    dmesg = lines(guest["console"], "dmesg: ")
    refused = [line for line in dmesg if "not a pvgpu window" in line]
    assert len(refused) == 3, "\n".join(dmesg)
    assert any("magic 0x12345678" in line for line in refused)
    assert any(f"size {2 * SMALL_SIZE}, BAR2 {SMALL_SIZE}" in line
               for line in refused)
    assert any(f"layout {vm.WINDOW_LAYOUT + 1}," in line for line in refused)
    assert "ok: no /dev/pvgpu2" in guest["console"]


def test_unbind_rebind_and_unload(guest):
    console = guest["console"]
    for step in ("the window is mapped write-back (PAT)",
                 "unbind through sysfs", "the mapping still reads after unbind",
                 "the mapping still writes after unbind",
                 "unloading the module while a file is open fails",
                 "bound again as /dev/pvgpu1", "rmmod"):
        assert f"ok: {step}" in console, f"missing: {step}"
    dmesg = "\n".join(lines(console, "dmesg: "))
    for bad in BAD_DMESG:
        assert bad not in dmesg, dmesg


def test_doorbell_and_interrupts(hole_doorbell_guest):
    assert_passed(hole_doorbell_guest)
    console = hole_doorbell_guest["console"]
    assert "sysfs: doorbell=1" in console
    assert "pvgpu_vmtest: doorbell passed" in console
    for step in (f"{DOORBELL_ROUNDS} rounds of ring, poll and read",
                 "the blocked reader wakes with ENODEV", "rmmod"):
        assert f"ok: {step}" in console, f"missing: {step}"
    server = hole_doorbell_guest["server"]
    assert server.error is None, server.error
    assert server.rings == DOORBELL_ROUNDS
    dmesg = "\n".join(lines(console, "dmesg: "))
    for bad in BAD_DMESG:
        assert bad not in dmesg, dmesg
