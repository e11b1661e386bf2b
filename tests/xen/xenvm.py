#!/usr/bin/env python3
"""Boot Debian's Xen 4.17 under QEMU TCG with a PV dom0, and PV domUs in it.

What Xen's own CI does (automation/scripts/qemu-alpine-x86_64.sh), with
Debian's pieces: the hypervisor (xen-hypervisor-4.17-amd64), Debian's 6.1
kernel for dom0 and the domUs (scripts/vm/fetch-kernel.sh), xen-utils-4.17
(xl, the C xenstored, xenconsoled) and their libraries copied into dom0's
busybox initramfs with ldd, and a domU initramfs carrying test programs
inside dom0's.  Nothing is installed on the host: the Xen packages are
unpacked into .deps/xen/ (fetch_xen(), `apt-get download`), and only the
libraries xl needs must be resolvable here (libxen-dev, or libxenmisc4.17).

dom0's script starts xenstored, xen-init-dom0 and xenconsoled, runs the
caller's dom0 script (which may `xl create` domUs: their consoles are
logged to /var/log/xen/console/guest-NAME.log, `show_domu_console NAME`
prints one), and powers off.  The guest's status comes back as in
scripts/vm/pvgpuvm.py ("pvgpu-guest: exit N").

  python3 tests/xen/xenvm.py boot              # dom0 only, prints timings
  python3 tests/xen/xenvm.py probe             # + a domU and the vchan probe
  python3 tests/xen/xenvm.py echo              # the probe, then transport-vchan.so
                                               # with two domUs (test_xen_boot.py)
"""

import argparse
import gzip
import importlib.util
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent.parent
DEPS_XEN = REPO / ".deps" / "xen"
XEN_VER = "4.17"
XEN_PACKAGES = [f"xen-hypervisor-{XEN_VER}-amd64", f"xen-utils-{XEN_VER}",
                "xenstore-utils"]
XEN_BIN = f"usr/lib/xen-{XEN_VER}/bin"

# dom0 needs these to run xenstored, xl and the vchan server; a domU needs
# the event channel and both grant devices (gntdev maps the server's ring,
# gntalloc grants the bulk window).
DOM0_MODULES = ["xen-evtchn", "xenfs", "xen-privcmd", "xen-gntdev",
                "xen-gntalloc"]
DOMU_MODULES = ["xen-evtchn", "xenfs", "xen-gntdev", "xen-gntalloc"]

# Tools dom0 carries (from the unpacked packages), by name in XEN_BIN or
# usr/bin; xenstore-* are copies of one multi-call binary.
DOM0_TOOLS = ["xl", "xenstored", "xenconsoled", "xen-init-dom0"]
XENSTORE_TOOLS = ["xenstore-read", "xenstore-write", "xenstore-ls",
                  "xenstore-list", "xenstore-rm", "xenstore-watch",
                  "xenstore-chmod"]


def _load_pvgpuvm():
    spec = importlib.util.spec_from_file_location(
        "pvgpuvm", REPO / "scripts" / "vm" / "pvgpuvm.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


vm = _load_pvgpuvm()
VmError = vm.VmError
EXIT_MARK = vm.EXIT_MARK


def fetch_xen():
    """.deps/xen/root with the Xen packages unpacked (downloaded with
    `apt-get download` the first time); raises VmError saying why not."""
    root = DEPS_XEN / "root"
    if (root / "boot" / f"xen-{XEN_VER}-amd64.gz").exists() and \
       (root / XEN_BIN / "xl").exists():
        return root
    if not shutil.which("apt-get") or not shutil.which("dpkg-deb"):
        raise VmError("no apt-get/dpkg-deb to fetch the Xen packages")
    debs = DEPS_XEN / "debs"
    debs.mkdir(parents=True, exist_ok=True)
    os.chmod(debs, 0o777)   # apt-get download drops to _apt as root
    proc = subprocess.run(["apt-get", "download", "-q"] + XEN_PACKAGES,
                          cwd=debs, capture_output=True, text=True)
    if proc.returncode != 0:
        raise VmError("cannot download the Xen packages: "
                      + proc.stderr.strip()[-300:])
    tmp = DEPS_XEN / "root.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    for deb in sorted(debs.glob("*.deb")):
        subprocess.run(["dpkg-deb", "-x", str(deb), str(tmp)], check=True)
    shutil.rmtree(root, ignore_errors=True)
    tmp.rename(root)
    return root


def hypervisor():
    """The uncompressed hypervisor image (QEMU's -kernel wants an ELF or
    multiboot image, not the .gz): /boot/xen-4.17-amd64.gz if installed,
    else the fetched one."""
    gz = Path(f"/boot/xen-{XEN_VER}-amd64.gz")
    if not gz.exists():
        gz = fetch_xen() / "boot" / gz.name
    out = DEPS_XEN / f"xen-{XEN_VER}-amd64"
    if not out.exists() or out.stat().st_mtime < gz.stat().st_mtime:
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_suffix(".tmp")
        tmp.write_bytes(gzip.decompress(gz.read_bytes()))
        tmp.rename(out)
    return out


def why_not():
    """None where Xen can be booted here, else the reason (a skip's)."""
    if not shutil.which("qemu-system-x86_64"):
        return "no qemu-system-x86_64 (apt-get install qemu-system-x86)"
    try:
        vm.busybox_path()
        vm.kernel_dir()
        hypervisor()
        fetch_xen()
    except VmError as e:
        return str(e)
    except OSError as e:
        return f"Xen images: {e}"
    missing = [lib for lib in ("libxenlight.so", "libxenstore.so")
               if not _ldconfig_has(lib)]
    if missing:
        return f"no {', '.join(missing)} here (apt-get install libxen-dev)"
    return None


def _ldconfig_has(name):
    out = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True)
    return name in out.stdout


def _libs(binaries):
    """Every shared library the binaries load (with the loader), as
    (host path, guest path), resolved by ldd on this machine."""
    seen = {}
    for b in binaries:
        for src, dst in vm.guest_libraries(b, skip=()):
            seen[dst] = src
    return [(src, dst) for dst, src in sorted(seen.items())]


DOMU_INIT = """
mount -t xenfs xenfs /proc/xen 2>/dev/null
export LD_LIBRARY_PATH=/usr/lib/pvgpu
"""


def domu_initramfs(out, script, files=(), kdir=None, kver=None):
    """A domU's initramfs: busybox, the Xen guest modules, files
    [(host, guest)] and their libraries, xenstore-read/write, and script."""
    root = fetch_xen()
    tools = [(root / "usr/bin/xenstore-read", "/usr/bin/xenstore-read"),
             (root / "usr/bin/xenstore-write", "/usr/bin/xenstore-write")]
    files = list(files) + tools
    libs = _libs([src for src, _ in files if _is_elf(src)])
    return vm.build_initramfs(out, DOMU_INIT + script, files=files + libs,
                              modules=DOMU_MODULES, kdir=kdir, kver=kver)


def _is_elf(path):
    with open(path, "rb") as f:
        return f.read(4) == b"\x7fELF"


DOM0_INIT = r"""
t0=$(cut -d' ' -f1 /proc/uptime)
echo "xen-dom0: up at $t0 s"
mkdir -p /proc/xen /var/run/xen /var/run/xenstored /var/lib/xen \
         /var/log/xen/console /run/xen /etc/xen
mount -t xenfs xenfs /proc/xen
mkdir -p /dev/pts; mount -t devpts devpts /dev/pts   # xenconsoled's ttys
: > /etc/xen/xl.conf
xenstored --pid-file /var/run/xen/xenstored.pid || { echo "xen-dom0: xenstored failed"; exit 90; }
n=0; while [ ! -S /var/run/xenstored/socket ] && [ $n -lt 100 ]; do sleep 0.1; n=$((n+1)); done
xen-init-dom0 >/dev/null || { echo "xen-dom0: xen-init-dom0 failed"; exit 91; }
xenconsoled --log=guest --log-dir=/var/log/xen/console || { echo "xen-dom0: xenconsoled failed"; exit 92; }
echo "xen-dom0: toolstack up at $(cut -d' ' -f1 /proc/uptime) s"

# A domU's own "pvgpu-guest: exit N" must not read as dom0's status.
show_domu_console() {   # show_domu_console NAME: its console log, prefixed
    tr -d '\r' < /var/log/xen/console/guest-$1.log 2>/dev/null |
        sed -e "s/pvgpu-guest: exit/pvgpu-guest exited/" -e "s/^/[$1] /"
}
# follow_domu_console NAME: its console on dom0's as it comes (background)
follow_domu_console() {
    tail -n +1 -F /var/log/xen/console/guest-$1.log 2>/dev/null | tr -d '\r' |
        sed -e "s/pvgpu-guest: exit/pvgpu-guest exited/" -e "s/^/[$1] /" &
}
# domu_create [-p] NAME...: each /etc/xen/NAME.cfg built paused, one after
# another, then all unpaused unless -p.  Under TCG a running domU takes the
# one CPU that dom0's next `xl create` needs: one CI run's second create,
# beside the first domU's boot, took minutes and failed.  xl's own errors
# are shown (prefixed) when it fails; one retry after destroying what it
# left, since a starved dom0 can miss one of libxl's timeouts.
domu_create() {
    keep=""; [ "$1" = -p ] && { keep=1; shift; }
    for d in "$@"; do
        try=1
        while ! xl create -p /etc/xen/$d.cfg >/tmp/xl-create-$d.log 2>&1; do
            sed "s/^/xen-dom0: xl: /" /tmp/xl-create-$d.log
            xl destroy $d >/dev/null 2>&1
            [ $try -ge 2 ] && { echo "xen-dom0: xl create $d failed"; exit 93; }
            echo "xen-dom0: xl create $d failed, once more"; try=$((try+1))
        done
        echo "xen-dom0: $d is domain $(xl domid $d), created at $(cut -d' ' -f1 /proc/uptime) s"
    done
    [ -n "$keep" ] && return 0
    for d in "$@"; do xl unpause $d; done
}
# domu_wait NAME SECONDS: until the domain is gone (0) or the time is up (1).
# Every wait here polls once a second: each poll is a fork and exec in a
# PV guest under TCG, CPU the guests' real work wants.
domu_wait() {
    n=0
    while xl domid "$1" >/dev/null 2>&1; do
        [ $n -ge $2 ] && return 1
        sleep 1; n=$((n+1))
    done
    return 0
}
"""


LIBGCC = ["/lib/x86_64-linux-gnu/libgcc_s.so.1", "/usr/lib/x86_64-linux-gnu/libgcc_s.so.1"]


def dom0_initramfs(out, script, files=(), kdir=None, kver=None):
    """dom0's initramfs: busybox, xen-utils with their libraries, the
    dom0 modules, files [(host, guest)] (domU kernels and initramfs, test
    programs and their libraries) and script (after the toolstack is up)."""
    root = fetch_xen()
    tools = []
    for name in DOM0_TOOLS:
        tools.append((root / XEN_BIN / name, f"/usr/sbin/{name}"))
    for name in XENSTORE_TOOLS:
        tools.append((root / "usr/bin" / name, f"/usr/bin/{name}"))
    files = list(files) + tools
    libs = _libs([src for src, _ in files if _is_elf(src)])
    # glibc dlopens libgcc_s for pthread_cancel (xl's child processes).
    libs += [(os.path.realpath(p), p) for p in LIBGCC if os.path.exists(p)][:1]
    return vm.build_initramfs(out, DOM0_INIT + script, files=files + libs,
                              modules=DOM0_MODULES, kdir=kdir, kver=kver)


def qemu_command(initrd, kdir, kver, smp=1, memory="2G", dom0_mem="1024M"):
    """DESIGN §7: q35 under TCG, -cpu qemu64,+svm (max crashes dom0), the
    hypervisor as the multiboot kernel, dom0's kernel and initramfs as its
    modules.

    dom0's kernel is the plain ELF (domu_kernel()): given the bzImage, Xen
    itself xz-decompresses it before dom0 starts, 20-50 s of a boot under
    TCG.  bootscrub=0: no scrubbing of the free RAM in the background,
    which under TCG takes host CPU from the vCPUs that work (nothing in
    these guests is secret).  console_timestamps=boot: Xen's lines carry
    seconds since boot, where a slow boot shows its time.

    One CPU, not DESIGN §7's two: the scenario in xen_scenario.py took
    about half the CPU seconds (124 against 223, both runs side by side
    on 2 loaded cores) and less wall time (358 s against 487 s).  Likely
    why: dom0, the domUs and their round trips share one pCPU, switched
    by Xen's scheduler rather than woken across vCPUs by IPIs, and no
    vCPU spins on a lock whose holder's QEMU thread the busy host has
    descheduled."""
    kernel = domu_kernel(kdir, kver)
    for p in (kernel, initrd):
        if "," in str(p):
            raise VmError(f"a comma in {p} would split QEMU's module list")
    dom0_cmdline = "console=hvc0 earlyprintk=xen panic=-1 quiet"
    return [vm.qemu_binary(), "-machine", "q35,accel=tcg",
            "-cpu", "qemu64,+svm", "-m", memory, "-smp", str(smp),
            "-nographic", "-no-reboot", "-nic", "none", "-vga", "none",
            "-kernel", str(hypervisor()),
            "-initrd", f"{kernel} {dom0_cmdline},{initrd}",
            "-append", f"console=com1 com1=115200,8n1 dom0_mem={dom0_mem},"
                       f"max:{dom0_mem} noreboot bootscrub=0 console_timestamps=boot"]


# How long a boot may take in all, and how long its console may stay silent
# (PVGPU_XEN_TIMEOUT, PVGPU_XEN_QUIET: seconds).  The first is a last
# resort; the second is what catches a hang.  Silence past QUIET counts as
# a hang once QEMU has also had QUIET_CPU_SHARE of that time on a CPU, or
# past QUIET_MAX_FACTOR times QUIET whatever it had: on CI's 2-core runner
# make test's higher-priority passes left this guest a tenth of a core
# for minutes, and a program that prints at its end was silent past 300 s
# while it worked.  A guest that spins in a hang has its CPU; one that
# idles in one is caught by the longer bound.
TIMEOUT = float(os.environ.get("PVGPU_XEN_TIMEOUT", "2700"))
QUIET = float(os.environ.get("PVGPU_XEN_QUIET", "300"))
QUIET_CPU_SHARE = 0.5
QUIET_MAX_FACTOR = 4


def cpu_seconds(pid):
    """CPU seconds a live process has had (all its threads), or None."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def silent_too_long(silent_s, cpu_s, quiet):
    """Whether a console silent for silent_s seconds, in which QEMU had
    cpu_s seconds of CPU (None: unknown), has hung."""
    if not quiet or silent_s <= quiet:
        return False
    if cpu_s is None or silent_s > quiet * QUIET_MAX_FACTOR:
        return True
    return cpu_s >= quiet * QUIET_CPU_SHARE


def run(cmd, timeout=TIMEOUT, log=None, echo=False, quiet=QUIET):
    """Run QEMU until dom0's script reports its status (then stop QEMU at
    once: Xen's power-off path under TCG is slow), `timeout` passes, or,
    with `quiet`, the console has printed nothing for that many seconds
    while QEMU ran (silent_too_long).  The scenarios print as they go, so
    a stall shows as silence long before a wall-clock limit that must also
    hold on a machine busy with other work (where TCG runs several times
    slower).  Returns (status, console,
    seconds): 124 on a timeout or silence, 125 when QEMU stopped without a
    status."""
    logf = open(log, "w") if log else None
    t0 = heard = time.monotonic()
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True)
    cpu_heard = cpu_seconds(proc.pid)
    chunks = []
    status = None
    tail = b""
    try:
        while True:
            now = time.monotonic()
            left = t0 + timeout - now
            if left <= 0:
                status = 124
                break
            if quiet and now - heard > quiet:
                cpu = cpu_seconds(proc.pid)
                used = None if cpu is None or cpu_heard is None else cpu - cpu_heard
                if silent_too_long(now - heard, used, quiet):
                    status = 124
                    break
            ready, _, _ = select.select([proc.stdout], [], [], min(left, 1.0))
            if not ready:
                continue
            data = os.read(proc.stdout.fileno(), 65536)
            if not data:
                break
            heard = time.monotonic()
            cpu_heard = cpu_seconds(proc.pid)
            chunks.append(data)
            if echo:
                sys.stdout.buffer.write(data)
                sys.stdout.flush()
            if logf:
                logf.write(data.decode(errors="replace"))
                logf.flush()
            tail = (tail + data)[-4096:]
            m = re.search(re.escape(EXIT_MARK.encode()) + rb"(\d+)\s", tail)
            if m:
                status = int(m.group(1))
                break
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        proc.stdout.close()
        if logf:
            logf.close()
    console = b"".join(chunks).decode(errors="replace").replace("\r\n", "\n")
    return (125 if status is None else status), console, time.monotonic() - t0


def domu_kernel(kdir, kver):
    """Debian's kernel for dom0 and the PV domUs, as the plain ELF inside its
    bzImage: xl's domain builder would otherwise xz-decompress 66 MB in
    dom0 for every domU, which under TCG is most of an `xl create`
    (10-30 s).  Extracted once into .deps/xen/ with Python's lzma."""
    import lzma
    out = DEPS_XEN / f"vmlinux-{kver}"
    src = Path(kdir) / "boot" / f"vmlinuz-{kver}"
    if out.exists() and out.stat().st_mtime >= src.stat().st_mtime:
        return out
    data = src.read_bytes()
    at = data.find(b"\xfd7zXZ\x00")
    if at < 0:
        return src          # not xz: let xl's builder decompress it
    elf = lzma.LZMADecompressor().decompress(data[at:])
    if elf[:4] != b"\x7fELF":
        return src
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    tmp.write_bytes(elf)
    tmp.rename(out)
    return out


def domu_config(name, kernel, ramdisk, memory=128, extra=""):
    """An xl config for a PV domU with no disk and no network."""
    return (f'name = "{name}"\ntype = "pv"\nkernel = "{kernel}"\n'
            f'ramdisk = "{ramdisk}"\n'
            f'extra = "console=hvc0 panic=-1 quiet {extra}"\n'
            f'memory = {memory}\nvcpus = 1\non_poweroff = "destroy"\n'
            f'on_crash = "destroy"\n')


PROBE_PATH = "/local/domain/0/data/pvgpu-probe"


def probe_scripts(nbytes):
    """(dom0 script, domU script) for the vchan probe pair."""
    dom0 = f"""
domu_create -p domu1
id=$(xl domid domu1)
vchan-probe server $id {PROBE_PATH}/$id {nbytes} &
srv=$!
xl unpause domu1
wait $srv; rc=$?
domu_wait domu1 60 || echo "xen-dom0: domu1 still running"
echo "xen-dom0: domu1 done at $(cut -d' ' -f1 /proc/uptime) s"
show_domu_console domu1
exit $rc
"""
    domu = f"""
id=$(xenstore-read domid)
vchan-probe client 0 {PROBE_PATH}/$id {nbytes}
"""
    return dom0, domu


def build_probe(workdir, probe, nbytes=1 << 20):
    """dom0 initramfs for the probe test, in workdir; returns its path."""
    kdir, kver = vm.kernel_dir()
    workdir = Path(workdir)
    dom0_script, domu_script = probe_scripts(nbytes)
    domu_rd = workdir / "domu.cpio"
    domu_initramfs(domu_rd, domu_script,
                   files=[(probe, "/usr/bin/vchan-probe")], kdir=kdir, kver=kver)
    cfg = workdir / "domu1.cfg"
    cfg.write_text(domu_config("domu1", "/domu/vmlinuz", "/domu/initrd"))
    dom0_rd = workdir / "dom0.cpio"
    dom0_initramfs(dom0_rd, dom0_script, files=[
        (probe, "/usr/bin/vchan-probe"),
        (domu_kernel(kdir, kver), "/domu/vmlinuz"),
        (domu_rd, "/domu/initrd"),
        (cfg, "/etc/xen/domu1.cfg")], kdir=kdir, kver=kver)
    return dom0_rd, kdir, kver


def build_scenario(workdir, dom0_script, domus, dom0_files=()):
    """dom0 initramfs carrying one initramfs and xl config per domU.
    domus: {name: (script, [(host, guest)][, memory MiB])}; the config
    is /etc/xen/NAME.cfg.  Returns (initramfs, kdir, kver)."""
    kdir, kver = vm.kernel_dir()
    workdir = Path(workdir)
    files = [(domu_kernel(kdir, kver), "/domu/vmlinuz")]
    for name, (script, domu_files, *memory) in domus.items():
        rd = workdir / f"{name}.cpio"
        domu_initramfs(rd, script, files=domu_files, kdir=kdir, kver=kver)
        cfg = workdir / f"{name}.cfg"
        cfg.write_text(domu_config(name, "/domu/vmlinuz", f"/domu/{name}.cpio",
                                   *memory))
        files += [(rd, f"/domu/{name}.cpio"), (cfg, f"/etc/xen/{name}.cfg")]
    dom0_rd = workdir / "dom0.cpio"
    dom0_initramfs(dom0_rd, dom0_script, files=files + list(dom0_files),
                   kdir=kdir, kver=kver)
    return dom0_rd, kdir, kver


VCHAN_BASE = "/local/domain/0/data/pvgpu"


def vchan_pair(so, nbytes=1 << 20, name="pvgpu", probe=True):
    """The shell for the bare vchan checks, to put into a scenario whose
    dom0 creates domu1 and domu2 (in that order: domids 1 and 2).

    dom0 runs `vchan-echo host` (transport-vchan.so's host half) at
    /local/domain/0/data/NAME for two sessions; domu1 connects through
    the .so (at `so` in the domU) to vchan://0/NAME with a granted window
    and checks echoes of 1 B to 1 MiB; domu2 corrupts its ring indexes
    after the setup frame and must lose only its own session.  With
    probe, domu1 first moves nbytes each way with dom0's `vchan-probe
    server` over a bare libxenvchan ring.

    Returns a dict of shell fragments: dom0_start (before the domUs are
    created: the host, $host), dom0_created (after: the probe server,
    $probe), dom0_end (waits for both, prints "xen-dom0: vchan-echo host
    exit N" and "xen-dom0: probe server exit N", and leaves the first
    failure's status in $pair_rc), dom0_show (the host's log, "[host] "
    lines), domu1 and domu2 (each domU's part).  dom0 carries
    vchan-echo and vchan-probe in /usr/bin, domu1 both and the .so,
    domu2 vchan-echo."""
    base = f"/local/domain/0/data/{name}"
    probe_dom0 = probe_domu = ""
    if probe:
        # Offered once both domUs exist; the client retries meanwhile and
        # each end waits up to 10 minutes for the other (probe.c).
        probe_dom0 = f"""
vchan-probe server $(xl domid domu1) {PROBE_PATH}/$(xl domid domu1) {nbytes} &
probe=$!
"""
        probe_domu = f"""
vchan-probe client 0 {PROBE_PATH}/$(xenstore-read domid) {nbytes}
"""
    dom0_start = f"""
vchan-echo host {base} 2 > /tmp/host.log 2>&1 &
host=$!
"""
    dom0_created = "probe=\n" + probe_dom0
    # Run once the domUs are done: their sessions have ended, so the host
    # has only its last lines to write.  A line every 30 s tells the
    # test's silent-console watch that dom0 still runs.
    dom0_end = """
n=0; while kill -0 $host 2>/dev/null && [ $n -lt 120 ]; do
    sleep 1; n=$((n+1))
    [ $((n % 30)) -eq 0 ] && echo "xen-dom0: host still serving at $(cut -d' ' -f1 /proc/uptime) s"
done
kill -0 $host 2>/dev/null && { echo "xen-dom0: host still running"; kill $host; }
wait $host; pair_rc=$?
echo "xen-dom0: vchan-echo host exit $pair_rc"
if [ -n "$probe" ]; then
    wait $probe; prc=$?
    echo "xen-dom0: probe server exit $prc"
    [ $pair_rc = 0 ] && pair_rc=$prc
fi
"""
    dom0_show = "sed 's/^/[host] /' /tmp/host.log\n"
    # The guest's connect waits for the offer as long as the host's
    # worker keeps it (vchan_echo.c): by then a loaded TCG dom0 may have
    # given the first offer up and be making the next.
    domu1 = probe_domu + f"""
PVGPU_VCHAN_CONNECT_MS=1800000 vchan-echo guest {so} vchan://0/{name}
"""
    # Its lines are marked: a scenario may run the corrupter again
    # against its own channel and check that run's lines.
    domu2 = f"""
vchan-echo corrupt {base}/$(xenstore-read domid) 2>&1 | sed 's/^/[{name}] /'
"""
    return {"dom0_start": dom0_start, "dom0_created": dom0_created,
            "dom0_end": dom0_end,
            "dom0_show": dom0_show, "domu1": domu1, "domu2": domu2}


def build_echo(workdir, echo, so, probe=None, nbytes=1 << 20):
    """transport-vchan.so end to end (vchan_pair()): in dom0 `vchan-echo
    host` serves two domUs; domu1 checks echoes through the .so's ops
    table, domu2 corrupts its ring.  With probe (the vchan-probe
    binary), domu1 first runs the bare libxenvchan pair with dom0's
    `vchan-probe server`."""
    pair = vchan_pair("/usr/lib/pvgpu/transport-vchan.so", nbytes,
                      probe=bool(probe))
    dom0 = pair["dom0_start"] + """
domu_create domu1 domu2
""" + pair["dom0_created"] + """
domu_wait domu1 1800; domu_wait domu2 60
""" + pair["dom0_end"] + """
echo "xen-dom0: done at $(cut -d' ' -f1 /proc/uptime) s"
""" + pair["dom0_show"] + """
show_domu_console domu1
show_domu_console domu2
exit $pair_rc
"""
    echo_files = [(echo, "/usr/bin/vchan-echo")]
    if probe:
        echo_files.append((probe, "/usr/bin/vchan-probe"))
    return build_scenario(workdir, dom0, {
        "domu1": (pair["domu1"], echo_files + [(so, "/usr/lib/pvgpu/transport-vchan.so")]),
        "domu2": (pair["domu2"], echo_files),
    }, dom0_files=echo_files)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=["boot", "probe", "echo"])
    ap.add_argument("--workdir", default=str(REPO / "build" / "xen" / "run"))
    ap.add_argument("--probe", default=str(REPO / "build" / "xen" / "vchan-probe"))
    ap.add_argument("--timeout", type=float, default=TIMEOUT)
    ap.add_argument("--smp", type=int, default=1)
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args(argv)
    reason = why_not()
    if reason:
        print(f"xenvm: cannot boot Xen here: {reason}", file=sys.stderr)
        return 3
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    if args.what == "boot":
        kdir, kver = vm.kernel_dir()
        rd = work / "dom0.cpio"
        dom0_initramfs(rd, "xl list\n", kdir=kdir, kver=kver)
    elif args.what == "probe":
        rd, kdir, kver = build_probe(work, args.probe)
    else:
        build = Path(args.probe).parent.parent
        rd, kdir, kver = build_echo(work, build / "xen" / "vchan-echo",
                                    build / "lib" / "pvgpu" / "transport-vchan.so",
                                    probe=args.probe)
    status, console, secs = run(qemu_command(rd, kdir, kver, smp=args.smp),
                                timeout=args.timeout, log=work / "console.log",
                                echo=not args.quiet)
    print(f"xenvm: {args.what}: status {status} after {secs:.1f} s "
          f"(console in {work / 'console.log'})")
    return status


if __name__ == "__main__":
    sys.exit(main())
