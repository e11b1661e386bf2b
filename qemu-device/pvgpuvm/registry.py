"""The registry: one small file per VM under RUN_DIR/vms/ (default
/run/pvgpu/vms/VM.conf) that tells pvgpud which window file and which vsock
CID, or which vhost-device-vsock Unix socket, belong to which VM.

pvgpud identifies a caller by the channel (DESIGN §5): the vsock peer CID,
or the vhost-user instance the connection came through.  This file is the
map from those to a VM, its window and its policy.  The format is flat
`key = value` lines so that a C daemon reads it with a dozen lines of code;
qemu-device/README.md documents every key.  Files are written to a
temporary name and renamed, so a reader never sees half of one.

The registry also remembers the choices that must stay stable for a VM
across re-attaches (its window id and CID), and hands out new ones that no
other registered VM uses.  Allocation happens under an flock on
vms/.lock so two attaches at once cannot pick the same CID.
"""

import fcntl
import hashlib
import os
from contextlib import contextmanager

from .errors import Failure
from .spec import (VSOCK_KERNEL, VSOCK_VHOST_USER, VgpuSpec, VsockSpec,
                   WindowLayout)

FORMAT = 1
FIRST_CID = 3          # 0-2 are reserved (hypervisor, local, host)
MAX_CID = 0xFFFFFFFE   # 0xffffffff is VMADDR_CID_ANY


class Registry:
    """The directory of VM entries."""

    def __init__(self, directory):
        self.dir = directory

    def path(self, vm):
        return os.path.join(self.dir, f"{vm}.conf")

    @contextmanager
    def locked(self):
        """Hold the registry lock (creating the directory on first use)."""
        os.makedirs(self.dir, mode=0o755, exist_ok=True)
        fd = os.open(os.path.join(self.dir, ".lock"), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def names(self):
        try:
            entries = os.listdir(self.dir)
        except FileNotFoundError:
            return []
        return sorted(e[:-5] for e in entries if e.endswith(".conf") and not e.startswith("."))

    def load(self, vm):
        """The VgpuSpec registered for `vm`, or None."""
        try:
            with open(self.path(vm), encoding="utf-8") as f:
                return parse_entry(f.read(), self.path(vm))
        except FileNotFoundError:
            return None

    def load_all(self):
        out = {}
        for name in self.names():
            try:
                spec = self.load(name)
            except Failure:
                continue   # a damaged entry must not stop every other attach
            if spec:
                out[name] = spec
        return out

    def save(self, spec):
        """Write the entry for spec.vm atomically (mode 0644: it holds no
        secret, and a pvgpud not running as root may read it)."""
        os.makedirs(self.dir, mode=0o755, exist_ok=True)
        if spec.vsock.uds_path:
            # pvgpud listens in it as soon as it reads the entry, before
            # `supervise` starts vhost-device-vsock there.
            os.makedirs(os.path.dirname(spec.vsock.uds_path), mode=0o755, exist_ok=True)
        tmp = self.path(spec.vm) + f".{os.getpid()}.tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(format_entry(spec))
            f.flush()
            os.fchmod(f.fileno(), 0o644)
        os.rename(tmp, self.path(spec.vm))

    def remove(self, vm):
        try:
            os.unlink(self.path(vm))
            return True
        except FileNotFoundError:
            return False

    def allocate_cid(self, vm, others):
        """The lowest CID from 3 up that no other registered VM holds."""
        used = {s.vsock.cid for name, s in others.items() if name != vm}
        cid = FIRST_CID
        while cid in used:
            cid += 1
        if cid > MAX_CID:
            raise Failure("no free vsock CID left in the registry")
        return cid

    def allocate_window_id(self, vm, others):
        """A stable 64-bit id for the VM's window: derived from its name so
        that re-creating a lost registry gives the same id, moved on if
        another VM already holds it, never 0 (that means shm://)."""
        used = {s.layout.window_id for name, s in others.items() if name != vm}
        digest = hashlib.sha256(f"pvgpu-window:{vm}".encode()).digest()
        wid = int.from_bytes(digest[:8], "little") or 1
        while wid in used or wid == 0:
            wid = (wid + 1) & 0xFFFFFFFFFFFFFFFF
        return wid


def format_entry(spec):
    """The text of a registry entry (see README.md, "The registry")."""
    v = spec.vsock
    lines = [
        "# pvgpu VM registry entry: written by pvgpu-vm, read by pvgpud.",
        f"format = {FORMAT}",
        f"vm = {spec.vm}",
        f"window.path = {spec.window_path}",
        f"window.size = {spec.layout.size}",
        f"window.id = {spec.layout.window_id:#018x}",
        f"window.staging_offset = {spec.layout.staging_offset}",
        f"window.slot_size = {spec.layout.slot_size}",
        f"window.nslots = {spec.layout.nslots}",
        f"vsock.transport = {v.kind}",
        f"vsock.cid = {v.cid}",
        f"vsock.port = {v.port}",
    ]
    if v.kind == VSOCK_VHOST_USER:
        lines += [
            f"vsock.socket = {v.socket}",
            f"vsock.uds_path = {v.uds_path}",
            f"vsock.listen = {v.uds_path}_{v.port}",
        ]
    lines.append(f"gpu = {spec.gpu}")
    lines.append(f"memory = {spec.memory if spec.memory is not None else 0}")
    if spec.qemu_uid is not None:
        lines.append(f"qemu.uid = {spec.qemu_uid}")
        lines.append(f"qemu.gid = {spec.qemu_gid if spec.qemu_gid is not None else -1}")
    return "\n".join(lines) + "\n"


def parse_entry(text, where="registry entry"):
    """Read back what format_entry wrote."""
    kv = {}
    for n, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        if not sep:
            raise Failure(f"{where}:{n}: expected 'key = value'")
        kv[key.strip()] = value.strip()
    try:
        if int(kv["format"]) != FORMAT:
            raise Failure(f"{where}: format {kv['format']} is not {FORMAT}")
        layout = WindowLayout(size=int(kv["window.size"]),
                              window_id=int(kv["window.id"], 0),
                              staging_offset=int(kv["window.staging_offset"]),
                              slot_size=int(kv["window.slot_size"]),
                              nslots=int(kv["window.nslots"]))
        kind = kv["vsock.transport"]
        if kind not in (VSOCK_KERNEL, VSOCK_VHOST_USER):
            raise Failure(f"{where}: unknown vsock.transport {kind!r}")
        vsock = VsockSpec(kind=kind, cid=int(kv["vsock.cid"]),
                          socket=kv.get("vsock.socket"), uds_path=kv.get("vsock.uds_path"),
                          port=int(kv["vsock.port"]))
        memory = int(kv.get("memory", "0")) or None
        uid = int(kv["qemu.uid"]) if "qemu.uid" in kv else None
        gid = int(kv["qemu.gid"]) if "qemu.gid" in kv else None
        return VgpuSpec(vm=kv["vm"], window_path=kv["window.path"], layout=layout,
                        vsock=vsock, gpu=int(kv["gpu"]), memory=memory,
                        qemu_uid=uid, qemu_gid=None if gid == -1 else gid)
    except KeyError as e:
        raise Failure(f"{where}: missing key {e.args[0]}")
    except ValueError as e:
        raise Failure(f"{where}: bad value: {e}")
