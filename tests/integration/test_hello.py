"""The hello negotiates feature bits (protocol/ops.spec `feature` lines), as
virtio does: a guest that knows fewer features than the backend still
works, with what both know; a guest from before feature bits works and is
sent nothing it could not read; a guest that needs a feature the backend
lacks is refused with CUDA_ERROR_NOT_SUPPORTED and a line that says which.
pvgpuctl, which now speaks through the guest's client library, reaches the
backend over every socket transport, IPv6 included.
"""
import os
import socket
import struct
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
import pvgpu_wire as W  # noqa: E402

from curesult import CUDA_ERROR_NOT_SUPPORTED  # noqa: E402
WINDOW = 1 << W.P.FEATURES["window"]
BATCH = 1 << W.P.FEATURES["batch"]
KNOWN = sum(1 << bit for bit in W.P.FEATURES.values())
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.path.join(REPO, os.environ.get("PVGPU_BUILD", "build"))


def raw_hello(s, payload):
    """Send a hello payload as is; (status, reply payload after the prefix)."""
    s.send(W.header(W.P.OPS["hello"][0], len(payload), 1) + payload)
    _op, _flags, _id, reply = s.read_message()
    return struct.unpack_from("<i", reply)[0], reply[8:]


def hello_fields(**values):
    base = dict(version_min=1, version_max=W.P.VERSION, pid=os.getpid(),
                token="", client="pytest")
    base.update(values)
    return base


def test_a_guest_that_knows_fewer_features_gets_those(start_pvgpud):
    daemon = start_pvgpud("sim", extra_args=["--log-level", "debug"])
    s = W.Session(daemon.unix)
    st, _d, outs, _ = s.call("hello", **hello_fields(features=WINDOW))
    assert st == 0
    assert outs["features"] == WINDOW
    # The session works with what was agreed.
    s.open_context()
    st, _d, out, _ = s.call("mem_alloc", size=4096)
    assert st == 0
    s.close()
    assert f"features {WINDOW:#x} agreed" in daemon.log()


def test_a_guest_that_knows_more_features_gets_the_common_ones(start_pvgpud):
    daemon = start_pvgpud("sim")
    s = W.Session(daemon.unix)
    st, _d, outs, _ = s.call("hello", **hello_fields(features=KNOWN | 1 << 50))
    assert st == 0
    assert outs["features"] == KNOWN
    s.close()


def test_a_guest_from_before_feature_bits_reads_what_it_always_did(start_pvgpud):
    daemon = start_pvgpud("sim")
    s = W.Session(daemon.unix)
    ins = [f for f in W.P.OPS["hello"][3] if ("hello", f[1]) not in W.P.OPTIONAL]
    st, reply = raw_hello(s, W.encode_fields(ins, hello_fields()))
    assert st == 0
    # version, device_count, session_id, data_block: and no features word,
    # which the old guest's decoder would refuse as trailing bytes.
    assert len(reply) == 4 + 4 + 8 + 4
    s.open_context()
    s.close()


def test_a_guest_that_needs_a_missing_feature_is_refused_clearly(start_pvgpud):
    daemon = start_pvgpud("sim")
    s = W.Session(daemon.unix)
    need = 1 << 40
    st, _d, _outs, _ = s.call("hello", **hello_fields(features=KNOWN | need,
                                                      required=need))
    assert st == CUDA_ERROR_NOT_SUPPORTED
    s.close()
    assert f"needs feature bits {need:#x}, which this backend lacks" in daemon.log()


def test_a_guest_that_needs_a_known_feature_is_served(start_pvgpud):
    daemon = start_pvgpud("sim")
    s = W.Session(daemon.unix)
    st, _d, outs, _ = s.call("hello", **hello_fields(features=KNOWN, required=WINDOW))
    assert st == 0 and outs["features"] & WINDOW
    s.close()


def pvgpuctl_devices(uri, env=None):
    return subprocess.run([os.path.join(BUILD, "bin", "pvgpuctl"), "devices", uri],
                          capture_output=True, text=True, timeout=30,
                          env=dict(os.environ, **(env or {})))


def test_pvgpuctl_speaks_unix_and_tcp_with_a_token(start_pvgpud):
    daemon = start_pvgpud("sim", extra_args=["--tcp-token", "s3cret"])
    res = pvgpuctl_devices(daemon.unix)
    assert res.returncode == 0, res.stderr
    assert "device(s)" in res.stdout and "device 0:" in res.stdout
    res = pvgpuctl_devices(daemon.tcp, {"PVGPU_TOKEN": "s3cret"})
    assert res.returncode == 0, res.stderr
    assert "device 0:" in res.stdout
    res = pvgpuctl_devices(daemon.tcp, {"PVGPU_TOKEN": "wrong"})
    assert res.returncode == 1 and "hello refused" in res.stderr


def ipv6_loopback():
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as s:
            s.bind(("::1", 0))
            return s.getsockname()[1]
    except OSError:
        return None


def test_ipv6_listen_and_connect(start_pvgpud):
    port = ipv6_loopback()
    if port is None:
        pytest.skip("no IPv6 loopback here")
    uri = f"tcp://[::1]:{port}"
    start_pvgpud("sim", extra_args=["--listen", uri])
    res = pvgpuctl_devices(uri)
    assert res.returncode == 0, res.stderr
    assert "device 0:" in res.stdout
