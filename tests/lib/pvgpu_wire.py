"""Speak the pvgpu wire protocol from Python, for tests that must send what a
well-behaved guest library never would.

The operation table comes from the generator's output (build/gen/pvgpu_proto.py),
so these tests follow ops.spec instead of restating it.
"""
import fcntl
import importlib.util
import os
import socket
import struct

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def load_proto(build=None):
    build = build or os.environ.get("PVGPU_BUILD", "build")
    path = os.path.join(REPO, build, "gen", "pvgpu_proto.py")
    spec = importlib.util.spec_from_file_location("pvgpu_proto", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


P = load_proto()


def load_generic():
    """{name: id} of the generic driver call (protocol/api/annotations.py
    GENERIC), the ids the driver_call ops carry."""
    spec = importlib.util.spec_from_file_location(
        "pvgpu_annotations", os.path.join(REPO, "protocol", "api", "annotations.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return {name: fid for fid, name, _types, _async in mod.generic()}, \
        {fid: (types, is_async) for fid, _name, types, is_async in mod.generic()}


# GENERIC_ARGS: {id: ([argument types as annotated], async)}.
GENERIC, GENERIC_ARGS = load_generic()
FIXED = {"u8": "B", "u16": "H", "u32": "I", "u64": "Q", "i32": "i", "i64": "q", "f32": "f"}
HDR = struct.Struct(P.HDR_FORMAT)
OPTIONAL_NAMES = {name for _op, name in getattr(P, "OPTIONAL", [])}


def window_memfd(name, size, sealed=True):
    """A memfd of size bytes for a shared window (shm://), sealed against
    shrinking as the guest library makes it (pvgpud refuses one that is
    not) unless sealed is False."""
    fd = os.memfd_create(name, os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    os.ftruncate(fd, size)
    if sealed:
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK)
    return fd


def encode_fields(fields, values):
    out = b""
    for type_, name, _max in fields:
        v = values.get(name, 0 if type_ in FIXED else b"")
        if type_ in FIXED:
            out += struct.pack("<" + FIXED[type_], v)
        elif type_.endswith("[]"):
            out += struct.pack("<I", len(v)) + b"".join(
                struct.pack("<" + FIXED[type_[:-2]], x) for x in v)
        else:
            if isinstance(v, str):
                v = v.encode()
            out += struct.pack("<I", len(v)) + v
    return out


def decode_fields(fields, data):
    values, off = {}, 0
    for type_, name, _max in fields:
        if off == len(data) and name in OPTIONAL_NAMES:
            values[name] = 0    # a peer from before this field sent none
            continue
        if type_ in FIXED:
            fmt = "<" + FIXED[type_]
            (values[name],) = struct.unpack_from(fmt, data, off)
            off += struct.calcsize(fmt)
        elif type_.endswith("[]"):
            (n,) = struct.unpack_from("<I", data, off)
            off += 4
            fmt = "<" + FIXED[type_[:-2]]
            size = struct.calcsize(fmt)
            values[name] = [struct.unpack_from(fmt, data, off + i * size)[0] for i in range(n)]
            off += n * size
        else:
            (n,) = struct.unpack_from("<I", data, off)
            off += 4
            values[name] = data[off:off + n]
            off += n
    return values


def header(opcode, length, msg_id, flags=0, magic=None):
    return HDR.pack(P.MAGIC if magic is None else magic, P.VERSION, opcode, flags, length, msg_id)


def message(op, msg_id=1, **values):
    opcode, _kind, _data, ins, _outs = P.OPS[op]
    payload = encode_fields(ins, values)
    return header(opcode, len(payload), msg_id) + payload


def data_frames(payload, msg_id, block=1 << 20):
    out = b""
    for i in range(0, len(payload), block):
        chunk = payload[i:i + block]
        out += header(P.OP_DATA, len(chunk), msg_id) + chunk
    return out


def batch(*messages):
    body = b"".join(messages)
    return header(P.OP_BATCH, len(body), 0) + body


class Session:
    """A raw connection to pvgpud: send bytes, read replies."""

    def __init__(self, uri, timeout=10.0, source=None):
        """source: the local address a TCP session connects from."""
        if uri.startswith("tcp://"):
            host, port = uri[len("tcp://"):].rsplit(":", 1)
            self.sock = socket.create_connection((host, int(port)), timeout=timeout,
                                                 source_address=source and (source, 0))
        else:
            assert uri.startswith("unix://"), uri
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.sock.settimeout(timeout)
            self.sock.connect(uri[len("unix://"):])
        self.next_id = 1

    def close(self):
        self.sock.close()

    def send(self, raw):
        self.sock.sendall(raw)

    def recv_exact(self, n):
        buf = b""
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise EOFError("backend closed the connection")
            buf += chunk
        return buf

    def read_message(self):
        magic, _ver, opcode, flags, length, msg_id = HDR.unpack(self.recv_exact(HDR.size))
        assert magic == P.MAGIC
        return opcode, flags, msg_id, self.recv_exact(length)

    def call(self, op, data_in=None, **values):
        """A sync call; returns (status, deferred, outputs, data_out)."""
        msg_id = self.next_id
        self.next_id += 1
        raw = message(op, msg_id, **values)
        if data_in is not None:
            raw += data_frames(data_in, msg_id)
        self.send(raw)
        data_out = b""
        while True:
            opcode, flags, rid, payload = self.read_message()
            assert rid == msg_id, (rid, msg_id)
            if opcode == P.OP_DATA:
                data_out += payload
                continue
            assert flags & P.F_REPLY and opcode == P.OPS[op][0]
            status, deferred = struct.unpack_from("<ii", payload)
            outs = decode_fields(P.OPS[op][4], payload[8:])
            return status, deferred, outs, data_out

    def driver(self, name, *args):
        """The generic driver call of cuda.h's function name with one u64
        per argument (annotations.py's order; a result slot non-zero when
        wanted): (status, results)."""
        st, _d, outs, _ = self.call("driver_call", fn=GENERIC[name], args=list(args))
        return st, outs.get("results", [])

    def event_create(self, flags=0):
        """cuEventCreate through the generic call: (status, event id)."""
        st, res = self.driver("cuEventCreate", 1, flags)
        return st, (res[0] if res and not st else 0)

    def window_attach(self, fd, **values):
        """window_attach passing fd, a window's memfd, as shm:// guests do:
        (status, outputs)."""
        msg_id = self.next_id
        self.next_id += 1
        self.sock.sendmsg([message("window_attach", msg_id, **values)],
                          [(socket.SOL_SOCKET, socket.SCM_RIGHTS, struct.pack("i", fd))])
        _op, _fl, rid, payload = self.read_message()
        assert rid == msg_id, (rid, msg_id)
        return struct.unpack_from("<i", payload)[0], \
            decode_fields(P.OPS["window_attach"][4], payload[8:])

    def queue(self, op, **values):
        msg_id = self.next_id
        self.next_id += 1
        self.send(message(op, msg_id, **values))

    def hello(self, token=""):
        st, _d, outs, _ = self.call("hello", version_min=1, version_max=P.VERSION,
                                    pid=os.getpid(), token=token, client="pytest")
        assert st == 0, st
        return outs

    def open_context(self, device=0):
        st, _d, outs, _ = self.call("ctx_create", device=device)
        assert st == 0, st
        self.queue("ctx_set", ctx=outs["ctx"])
        return outs["ctx"]

    def alloc(self, size):
        """Device memory that must be had: its address."""
        st, _d, outs, _ = self.call("mem_alloc", size=size)
        assert st == 0, st
        return outs["dptr"]

    def mem_info(self):
        """(free, total) device memory as cuMemGetInfo says them."""
        st, _d, outs, _ = self.call("mem_get_info")
        assert st == 0, st
        return outs["free"], outs["total"]

    def array(self, width, height=0, depth=0, format=0x20, channels=1, flags=0):
        """cuArray3DCreate on the wire (format: CU_AD_FORMAT_FLOAT):
        (status, array id or 0)."""
        st, _d, outs, _ = self.call("array_create", width=width, height=height, depth=depth,
                                    format=format, channels=channels, flags=flags)
        return st, outs.get("array", 0)


def context_session(uri):
    """A session said hello, with a context on device 0 made current."""
    s = Session(uri)
    s.hello()
    s.open_context()
    return s
