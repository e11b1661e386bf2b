"""Running vhost-device-vsock for one VM, and running it again when it dies.

Without /dev/vhost-vsock, a VM's virtio-vsock is served by a
vhost-device-vsock process (DESIGN §7): QEMU connects to its `socket`, and a
guest connection to CID 2 port P comes out on the host as a connection to
the Unix socket `uds_path`_P, where pvgpud listens.  One process per VM, so
that one dying (the "Bad input" case) touches one VM only, and so that the
socket a connection arrives on says which VM it is (DESIGN §5).

Checked on QEMU 7.2: QEMU survives the backend's death but does not
reconnect (vhost-user-vsock-pci fails to realize with a reconnecting
chardev), so the VM that was connected has no vsock until QEMU restarts;
the restarted backend serves the next start of that VM.  vhost-device-vsock
itself survives QEMU exiting and accepts the next QEMU, so a domain can be
stopped and started under one supervisor.

The supervisor holds an flock on RUN/vsock/VM/supervise.lock for its whole
life, so a second one for the same VM refuses to start, and writes the pid
of the current vhost-device-vsock to RUN/vsock/VM/vhost-device-vsock.pid.
"""

import fcntl
import os
import shutil
import signal
import stat
import subprocess
import sys
import time

from .errors import Failure
from .spec import VSOCK_VHOST_USER

SOCKET_WAIT_S = 10.0
BACKOFF_FIRST_S = 1.0
BACKOFF_MAX_S = 30.0
HEALTHY_AFTER_S = 60.0   # a run this long resets the back-off
STOP_WAIT_S = 15.0


def log(msg):
    print(f"pvgpu-vm supervise: {msg}", file=sys.stderr, flush=True)


def find_binary(explicit=None):
    """vhost-device-vsock from --vhost-device-vsock, $PVGPU_VHOST_DEVICE_VSOCK,
    $PATH, or cargo's install directory (where `cargo install` puts it)."""
    candidates = [explicit, os.environ.get("PVGPU_VHOST_DEVICE_VSOCK"),
                  shutil.which("vhost-device-vsock")]
    for home in (os.environ.get("CARGO_HOME"), os.path.expanduser("~/.cargo"), "/root/.cargo"):
        if home:
            candidates.append(os.path.join(home, "bin", "vhost-device-vsock"))
    for c in candidates:
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    raise Failure("vhost-device-vsock not found: `cargo install vhost-device-vsock@0.3.0`, "
                  "or pass --vhost-device-vsock PATH")


def describe_status(returncode):
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exit status {returncode}"


def _remove_stale_socket(path):
    """Remove a socket left by a dead instance (never any other kind of file)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(st.st_mode):
        raise Failure(f"{path} exists and is not a socket: refused")
    os.unlink(path)


def unreachable_dir(path, uid, gid):
    """The first directory above `path` that uid/gid may not search, or
    None.  (Supplementary groups are not considered: a warning at most.)"""
    if uid is None or uid == 0:
        return None
    directory = os.path.dirname(os.path.abspath(path))
    parts = directory.split(os.sep)
    for i in range(1, len(parts) + 1):
        d = os.sep.join(parts[:i]) or os.sep
        try:
            st = os.stat(d)
        except FileNotFoundError:
            return None
        if st.st_uid == uid:
            bit = stat.S_IXUSR
        elif st.st_gid == gid:
            bit = stat.S_IXGRP
        else:
            bit = stat.S_IXOTH
        if not st.st_mode & bit:
            return d
    return None


class Supervisor:
    def __init__(self, spec, binary):
        if spec.vsock.kind != VSOCK_VHOST_USER:
            raise Failure(f"VM {spec.vm} uses kernel vhost-vsock: there is no "
                          "vhost-device-vsock to supervise")
        self.spec = spec
        self.binary = binary
        self.dir = os.path.dirname(spec.vsock.socket)
        self.pidfile = os.path.join(self.dir, "vhost-device-vsock.pid")
        self.child = None
        self.stopping = False

    def command(self):
        v = self.spec.vsock
        return [self.binary, "--vm", f"guest-cid={v.cid},socket={v.socket},uds-path={v.uds_path}"]

    def _lock(self):
        os.makedirs(self.dir, mode=0o755, exist_ok=True)
        fd = os.open(os.path.join(self.dir, "supervise.lock"),
                     os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
            os.close(fd)
            raise Failure(f"vhost-device-vsock of VM {self.spec.vm} is already supervised "
                          f"(pid {holder})")
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        return fd   # kept open (and locked) until the process exits

    def _on_signal(self, signum, _frame):
        self.stopping = True
        if self.child and self.child.poll() is None:
            self.child.terminate()

    def _start(self):
        v = self.spec.vsock
        _remove_stale_socket(v.socket)
        _remove_stale_socket(v.uds_path)
        self.child = subprocess.Popen(self.command(), stdin=subprocess.DEVNULL)
        with open(self.pidfile + ".tmp", "w") as f:
            f.write(f"{self.child.pid}\n")
        os.rename(self.pidfile + ".tmp", self.pidfile)
        log(f"VM {self.spec.vm}: vhost-device-vsock started (pid {self.child.pid})")
        self._share_socket()

    def _share_socket(self):
        """QEMU runs as its own user under libvirt: let it connect."""
        path = self.spec.vsock.socket
        deadline = time.monotonic() + SOCKET_WAIT_S
        while not os.path.exists(path):
            if self.child.poll() is not None or self.stopping:
                return
            if time.monotonic() > deadline:
                log(f"vhost-device-vsock of VM {self.spec.vm} has not created {path} "
                    f"after {SOCKET_WAIT_S:.0f}s")
                return
            time.sleep(0.05)
        uid, gid = self.spec.qemu_uid, self.spec.qemu_gid
        if uid is not None or gid is not None:
            os.chown(path, -1 if uid is None else uid, -1 if gid is None else gid)
        os.chmod(path, 0o660)
        blocked = unreachable_dir(path, uid, gid)
        if blocked:
            log(f"QEMU (uid {uid}) cannot reach {path}: {blocked} is not searchable "
                "for it, so the VM will not start: make it o+x or use another --run-dir")

    def _sleep(self, seconds):
        end = time.monotonic() + seconds
        while not self.stopping and time.monotonic() < end:
            time.sleep(min(0.1, end - time.monotonic()))

    def run(self):
        lock_fd = self._lock()
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)
        backoff = BACKOFF_FIRST_S
        log(f"VM {self.spec.vm}: supervising {' '.join(self.command())}")
        try:
            while not self.stopping:
                started = time.monotonic()
                self._start()
                returncode = self.child.wait()
                if self.stopping:
                    break
                if time.monotonic() - started >= HEALTHY_AFTER_S:
                    backoff = BACKOFF_FIRST_S
                log(f"vhost-device-vsock of VM {self.spec.vm} (pid {self.child.pid}) died "
                    f"({describe_status(returncode)}); restarting in {backoff:.0f}s (a running "
                    "guest has no vsock until its QEMU restarts)")
                self._sleep(backoff)
                backoff = min(backoff * 2, BACKOFF_MAX_S)
        finally:
            if self.child and self.child.poll() is None:
                self.child.terminate()
                try:
                    self.child.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    self.child.kill()
                    self.child.wait()
            try:
                os.unlink(self.pidfile)
            except FileNotFoundError:
                pass
            for path in (self.spec.vsock.socket, self.spec.vsock.uds_path):
                try:
                    _remove_stale_socket(path)
                except Failure:
                    pass
            os.close(lock_fd)
        log(f"VM {self.spec.vm}: stopped")
        return 0


def stop(spec):
    """Ask a running supervisor of this VM to stop (used by detach/release).
    Returns True if there was one."""
    lock = os.path.join(os.path.dirname(spec.vsock.socket), "supervise.lock")
    try:
        fd = os.open(lock, os.O_RDWR | os.O_CLOEXEC)
    except FileNotFoundError:
        return False
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return False          # nobody holds it: no supervisor
        except BlockingIOError:
            pass
        try:
            pid = int(os.pread(fd, 32, 0).decode().strip())
        except ValueError:
            return False
        os.kill(pid, signal.SIGTERM)
        # Wait for it to let go of the lock, i.e. to have cleaned up.
        deadline = time.monotonic() + STOP_WAIT_S
        while time.monotonic() < deadline:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return True
            except BlockingIOError:
                time.sleep(0.1)
        raise Failure(f"supervisor of VM {spec.vm} (pid {pid}) did not stop within "
                      f"{STOP_WAIT_S:.0f}s")
    finally:
        os.close(fd)
