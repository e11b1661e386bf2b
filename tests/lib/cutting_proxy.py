"""A proxy in front of pvgpud that cuts connections, as a VM's live
migration resets its virtio-vsock connection: each of the first `cuts`
connections is closed (both ways, at once) after a random number of bytes
has passed in one direction, anywhere in a message (mid-header, mid-batch,
mid-DATA frame); later ones pass untouched.  Listens on a Unix socket or a
loopback TCP port and forwards to pvgpud's Unix socket or TCP port; over
Unix sockets, descriptors passed with the bytes (shm://'s window) pass
too.  With `after_kicks`, each cut comes at a wake-up instead (the Nth of
a range, a wake-up being a read of a byte or two: every message is
longer): a session whose messages go through a shared window's ring
(shm://) sends the socket nothing but wake-ups once its window is
attached, and the side woken is the one asleep on the socket, sure to
see it go."""
import array
import os
import random
import select
import socket
import threading

MAX_FDS = 8
# Wake-ups are a byte or two; every message is longer (its header alone).
KICK_MAX = 8


def _connect(uri):
    if uri.startswith("tcp://"):
        host, port = uri[len("tcp://"):].rsplit(":", 1)
        return socket.create_connection((host, int(port)), timeout=10)
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(uri[len("unix://"):])
    return s


class CuttingProxy:
    def __init__(self, backend, listen_dir, tcp=False, cuts=3, seed=None,
                 low=64, high=200_000, after_kicks=None):
        """backend: pvgpud's unix:// or tcp:// URI.  Each cut comes after
        low..high bytes (to the backend and from it together) of its
        connection, or at wake-up number after_kicks=(low, high)."""
        self.backend = backend
        self.rng = random.Random(seed)
        self.cuts_left = cuts
        self.low, self.high = low, high
        self.after_kicks = after_kicks
        self.unix = not tcp
        self.cut_at = []        # bytes each cut connection carried
        self.connections = 0
        self.lock = threading.Lock()
        if tcp:
            self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            self.sock.bind(("127.0.0.1", 0))
            self.uri = f"tcp://127.0.0.1:{self.sock.getsockname()[1]}"
        else:
            path = os.path.join(str(listen_dir), "cut.sock")
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.sock.bind(path)
            self.uri = f"unix://{path}"
        self.sock.listen(16)
        self.stopping = False
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self):
        while not self.stopping:
            try:
                guest, _ = self.sock.accept()
            except OSError:
                return
            with self.lock:
                self.connections += 1
                limit = None
                if self.cuts_left > 0:
                    self.cuts_left -= 1
                    lo, hi = self.after_kicks or (self.low, self.high)
                    limit = self.rng.randint(lo, hi)
            threading.Thread(target=self._pipe, args=(guest, limit),
                             daemon=True).start()

    def _pipe(self, guest, limit):
        try:
            backend = _connect(self.backend)
        except OSError:
            guest.close()
            return
        passed = 0
        peers = {guest: backend, backend: guest}
        kicks = self.after_kicks is not None and limit is not None
        kicked = 0
        try:
            while True:
                ready, _, _ = select.select(list(peers), [], [], 60)
                if not ready:
                    break
                for src in ready:
                    data, fds = self._recv(src)
                    if not data:
                        return
                    if fds:
                        self._send_fds(peers[src], data, fds)
                        passed += len(data)
                        continue
                    if kicks and len(data) <= KICK_MAX:
                        kicked += 1
                        if kicked >= limit:
                            # Not passed on: the side asleep sees the cut.
                            with self.lock:
                                self.cut_at.append(passed)
                            return
                    if not kicks and limit is not None and passed + len(data) >= limit:
                        part = data[:limit - passed]
                        if part:
                            peers[src].sendall(part)
                        with self.lock:
                            self.cut_at.append(limit)
                        return
                    peers[src].sendall(data)
                    passed += len(data)
        except OSError:
            return
        finally:
            # A reset, as a migration leaves it: both ends at once.
            for s in (guest, backend):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                s.close()

    def _recv(self, src):
        """Bytes, and the descriptors passed with them (Unix sockets)."""
        if not self.unix:
            return src.recv(65536), []
        fds = array.array("i")
        data, anc, _flags, _addr = src.recvmsg(65536, socket.CMSG_SPACE(MAX_FDS * fds.itemsize))
        for level, kind, payload in anc:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds.frombytes(payload[:len(payload) - len(payload) % fds.itemsize])
        return data, list(fds)

    @staticmethod
    def _send_fds(dst, data, fds):
        try:
            dst.sendmsg([data], [(socket.SOL_SOCKET, socket.SCM_RIGHTS,
                                  array.array("i", fds))])
        finally:
            for fd in fds:
                os.close(fd)

    def close(self):
        self.stopping = True
        self.sock.close()
