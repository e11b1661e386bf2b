"""Live migration of a QEMU VM with a vGPU, on one host.

QEMU 7.2 will not migrate a vhost-user-vsock device ("non-migratable
device"; vhost-device-vsock has no dirty log either), and a kernel
vhost-vsock device's CID cannot be held by two QEMUs of one host at once.
So the vsock goes the way an operator unplugs an SR-IOV NIC around a
migration: the destination QEMU is started without it (`pvgpu-vm
qemu-args NAME --incoming URI`), the source's is unplugged (the guest's
vsock connections reset, as after any migration of a vsock device), the VM
migrates, and the destination gets the device plugged in again, reaching
the same pvgpud socket under the same VM identity.  A guest library that
was given a resume token connects again and resumes its session
(`resume_grace`); the program sees a call that took longer.

The window (ivshmem-plain over the VM's window file) migrates as a RAM
block of the same file; sessions that use it are not resumed yet, so a
guest meant to live through a migration runs its programs over vsock alone.
"""

import json
import select
import socket
import time

from .errors import Failure
from .generate import VSOCK_CHARDEV_ID, VSOCK_DEV_ID
from .spec import VSOCK_KERNEL


class Qmp:
    """A QMP client over a Unix socket: one command at a time, events kept.

    QEMU's own Python client (qemu.qmp) is not packaged for Debian 12, whose
    python3 runs pvgpu-vm without pip; the few commands used here need
    only the protocol's JSON lines."""

    TIMEOUT = 30.0

    def __init__(self, path):
        self.path = path
        self.events = []
        self.buf = b""
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self.sock.connect(path)
        except OSError as e:
            self.sock.close()
            raise Failure(f"QMP socket {path}: {e.strerror or e}")
        if "QMP" not in self._read(time.monotonic() + self.TIMEOUT):
            raise Failure(f"QMP socket {path}: no QMP greeting")
        self.command("qmp_capabilities")

    def _read(self, deadline):
        """The next message, or None once `deadline` (monotonic) passed."""
        while b"\n" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.sock], [], [], left)[0]:
                return None
            try:
                data = self.sock.recv(65536)
            except OSError as e:
                raise Failure(f"QMP socket {self.path}: {e.strerror or e}")
            if not data:
                raise Failure(f"QMP socket {self.path}: QEMU closed it")
            self.buf += data
        line, _, self.buf = self.buf.partition(b"\n")
        return json.loads(line)

    def execute(self, name, **arguments):
        """The reply to `name`: {"return": ...} or {"error": ...}."""
        msg = {"execute": name}
        if arguments:
            msg["arguments"] = arguments
        self.sock.sendall(json.dumps(msg).encode() + b"\n")
        deadline = time.monotonic() + self.TIMEOUT
        while True:
            reply = self._read(deadline)
            if reply is None:
                raise Failure(f"QMP {name}: no answer in {self.TIMEOUT:.0f} s")
            if "event" in reply:
                self.events.append(reply)
            else:
                return reply

    def command(self, name, **arguments):
        reply = self.execute(name, **arguments)
        if "error" in reply:
            raise Failure(f"QMP {name}: {reply['error'].get('desc', reply['error'])}")
        return reply.get("return")

    def wait_event(self, name, deadline, match=lambda data: True):
        """The event `name` whose data `match`es, by `deadline` (monotonic)."""
        while True:
            for ev in self.events:
                if ev["event"] == name and match(ev.get("data", {})):
                    self.events.remove(ev)
                    return ev
            reply = self._read(deadline)
            if reply is None:
                raise Failure(f"QMP {self.path}: no {name} event in time")
            if "event" in reply:
                self.events.append(reply)

    def close(self):
        self.sock.close()


def device_args(spec):
    """device_add's arguments for the VM's vsock device."""
    if spec.vsock.kind == VSOCK_KERNEL:
        return {"driver": "vhost-vsock-pci", "guest-cid": spec.vsock.cid, "id": VSOCK_DEV_ID}
    return {"driver": "vhost-user-vsock-pci", "chardev": VSOCK_CHARDEV_ID, "id": VSOCK_DEV_ID}


def unplug(qmp, spec, deadline):
    """Take the vsock device out of a running guest (the guest ejects it:
    ACPI or PCIe hotplug) and close its vhost-user chardev, so that
    vhost-device-vsock serves the next QEMU."""
    qmp.command("device_del", id=VSOCK_DEV_ID)
    qmp.wait_event("DEVICE_DELETED", deadline, lambda d: d.get("device") == VSOCK_DEV_ID)
    if spec.vsock.kind != VSOCK_KERNEL:
        qmp.command("chardev-remove", id=VSOCK_CHARDEV_ID)


def plug(qmp, spec, deadline):
    """Give a running guest its vsock device again; vhost-device-vsock may
    still be taking leave of the previous QEMU, so the chardev is retried
    until `deadline`."""
    if spec.vsock.kind != VSOCK_KERNEL:
        backend = {"type": "socket", "data": {
            "addr": {"type": "unix", "data": {"path": spec.vsock.socket}},
            "server": False}}
        while True:
            reply = qmp.execute("chardev-add", id=VSOCK_CHARDEV_ID, backend=backend)
            if "error" not in reply:
                break
            if time.monotonic() > deadline:
                raise Failure(f"QMP chardev-add {spec.vsock.socket}: "
                              f"{reply['error'].get('desc')}")
            time.sleep(0.2)
    qmp.command("device_add", **device_args(spec))


def wait_migrated(src, deadline):
    """query-migrate's last answer once the migration has ended."""
    while True:
        info = src.command("query-migrate")
        status = info.get("status")
        if status == "completed":
            return info
        if status in ("failed", "cancelled"):
            raise Failure(f"migration {status}: {info.get('error-desc', 'no reason given')}")
        if time.monotonic() > deadline:
            src.execute("migrate_cancel")
            raise Failure("migration did not complete in time (cancelled)")
        time.sleep(0.1)


def wait_running(dst, deadline):
    while dst.command("query-status").get("status") != "running":
        if time.monotonic() > deadline:
            raise Failure("the destination did not start running")
        time.sleep(0.1)


def migrate(spec, src_path, dst_path, uri, timeout=300.0, quit_source=False, say=print):
    """Move the VM of `spec` from the QEMU at QMP socket `src_path` to the
    one at `dst_path` (started with -incoming URI, without the vsock
    device).  Returns a dict of what it measured (seconds)."""
    deadline = time.monotonic() + timeout
    src, dst = Qmp(src_path), Qmp(dst_path)
    try:
        if dst.command("query-status").get("status") != "inmigrate":
            raise Failure(f"{dst_path}: that QEMU is not waiting for a migration "
                          "(start it with the arguments of qemu-args --incoming)")
        t0 = time.monotonic()
        unplug(src, spec, deadline)
        t_unplugged = time.monotonic()
        try:
            src.command("migrate", uri=uri)
            info = wait_migrated(src, deadline)
        except Failure:
            # The VM stays where it was: give it its vsock back.
            plug(src, spec, deadline + 30)
            raise
        t_migrated = time.monotonic()
        wait_running(dst, deadline)
        plug(dst, spec, deadline)
        t_plugged = time.monotonic()
        if quit_source:
            src.execute("quit")
        out = {"unplug_s": t_unplugged - t0,
               "migrate_s": t_migrated - t_unplugged,
               "downtime_s": info.get("downtime", 0) / 1e3,
               "ram_mib": info.get("ram", {}).get("transferred", 0) / (1 << 20),
               "without_vsock_s": t_plugged - t0}
        say(f"migrated {spec.vm}: vsock unplugged in {out['unplug_s']:.2f} s, "
            f"{out['ram_mib']:.0f} MiB moved in {out['migrate_s']:.2f} s "
            f"(downtime {out['downtime_s'] * 1e3:.0f} ms), vsock back after "
            f"{out['without_vsock_s']:.2f} s")
        return out
    finally:
        src.close()
        dst.close()
