"""The driver's peer calls one by one, on two GPUs of one backend: a
guest script (run_guest_script) and the answers NVIDIA's driver gives
(580 on two H200s, checked by tests/gpu/test_gpu_multigpu.py), which
pvgpu must give too (tests/integration/test_multigpu.py, over the sim).

The two calls with a bogus context are pvgpu's alone: NVIDIA's driver
reads through such a pointer (it answered 709 to the first and crashed in
the second), so the script leaves them out when argv[2] is "native".
"""
from curesult import (
    CUDA_ERROR_INVALID_VALUE, CUDA_ERROR_INVALID_DEVICE,
    CUDA_ERROR_INVALID_CONTEXT, CUDA_ERROR_PEER_ACCESS_UNSUPPORTED,
    CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED,
    CUDA_ERROR_PEER_ACCESS_NOT_ENABLED)
from pvgpu_guest import SCRIPT_PRELUDE

SCRIPT = SCRIPT_PRELUDE + r'''
native = sys.argv[2:3] == ["native"]
def ask(name, *args):
    print(name, call(name, *args))
must("cuInit", 0)
ctx, buf, val = [vp(), vp()], [u64(), u64()], c_int(-1)
for d in (0, 1):
    must("cuDevicePrimaryCtxRetain", ctypes.byref(ctx[d]), d)
    must("cuCtxSetCurrent", ctx[d])
    must("cuMemAlloc_v2", ctypes.byref(buf[d]), sz(4096))
must("cuDeviceCanAccessPeer", ctypes.byref(val), 1, 0)
print("can", val.value)
ask("cuDeviceCanAccessPeer", ctypes.byref(val), 1, 2)
ask("cuDeviceCanAccessPeer", ctypes.byref(val), -1, 0)
ask("cuDeviceCanAccessPeer", None, 1, 0)
must("cuDeviceGetP2PAttribute", ctypes.byref(val), 2, 0, 1)
print("attr", val.value)
ask("cuDeviceGetP2PAttribute", ctypes.byref(val), 2, 0, 0)
ask("cuDeviceGetP2PAttribute", ctypes.byref(val), 99, 0, 1)
ask("cuDeviceGetP2PAttribute", ctypes.byref(val), 2, 0, 7)
# Device 1's context current.
ask("cuCtxEnablePeerAccess", ctx[1], 0)
ask("cuCtxEnablePeerAccess", ctx[0], 1)
bogus = ctypes.cast(ctypes.create_string_buffer(64), vp)
if not native:
    ask("cuCtxEnablePeerAccess", bogus, 0)
ask("cuCtxEnablePeerAccess", None, 0)
ask("cuCtxDisablePeerAccess", ctx[0])
ask("cuCtxEnablePeerAccess", ctx[0], 0)
ask("cuCtxEnablePeerAccess", ctx[0], 0)
ask("cuCtxDisablePeerAccess", ctx[0])
ask("cuCtxDisablePeerAccess", ctx[0])
# Copies: under unified addressing a pointer says where its memory is,
# whichever of the process's contexts is named with it.
ask("cuMemcpyPeer", buf[1], ctx[1], buf[0], ctx[0], sz(4096))
ask("cuMemcpyPeer", buf[0], ctx[1], buf[0], ctx[0], sz(16))
ask("cuMemcpyPeer", buf[1], ctx[1], buf[0], ctx[0], sz(8192))
ask("cuMemcpyPeerAsync", buf[1], ctx[1], buf[1], ctx[0], sz(16), None)
if not native:
    ask("cuMemcpyPeer", buf[1], bogus, buf[0], ctx[0], sz(16))
must("cuCtxSetCurrent", None)
ask("cuCtxEnablePeerAccess", ctx[0], 0)
print("PASS")
'''

# (answer, asked of NVIDIA's driver too)
_ANSWERS = [
    ("can 1", True),
    (f"cuDeviceCanAccessPeer {CUDA_ERROR_INVALID_DEVICE}", True),
    (f"cuDeviceCanAccessPeer {CUDA_ERROR_INVALID_DEVICE}", True),
    (f"cuDeviceCanAccessPeer {CUDA_ERROR_INVALID_VALUE}", True),
    ("attr 1", True),
    (f"cuDeviceGetP2PAttribute {CUDA_ERROR_INVALID_DEVICE}", True),
    (f"cuDeviceGetP2PAttribute {CUDA_ERROR_INVALID_VALUE}", True),
    (f"cuDeviceGetP2PAttribute {CUDA_ERROR_INVALID_DEVICE}", True),
    (f"cuCtxEnablePeerAccess {CUDA_ERROR_PEER_ACCESS_UNSUPPORTED}", True),  # its own
    (f"cuCtxEnablePeerAccess {CUDA_ERROR_INVALID_VALUE}", True),    # flags
    (f"cuCtxEnablePeerAccess {CUDA_ERROR_INVALID_CONTEXT}", False),  # bogus
    (f"cuCtxEnablePeerAccess {CUDA_ERROR_INVALID_CONTEXT}", True),
    (f"cuCtxDisablePeerAccess {CUDA_ERROR_PEER_ACCESS_NOT_ENABLED}", True),
    ("cuCtxEnablePeerAccess 0", True),
    (f"cuCtxEnablePeerAccess {CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED}", True),
    ("cuCtxDisablePeerAccess 0", True),
    (f"cuCtxDisablePeerAccess {CUDA_ERROR_PEER_ACCESS_NOT_ENABLED}", True),
    ("cuMemcpyPeer 0", True),
    ("cuMemcpyPeer 0", True),                                       # dst on device 0
    (f"cuMemcpyPeer {CUDA_ERROR_INVALID_VALUE}", True),             # past the end
    ("cuMemcpyPeerAsync 0", True),                                  # src on device 1
    (f"cuMemcpyPeer {CUDA_ERROR_INVALID_CONTEXT}", False),          # bogus
    (f"cuCtxEnablePeerAccess {CUDA_ERROR_INVALID_CONTEXT}", True),  # none current
    ("PASS", True),
]


def answers(native=False):
    """The script's output lines: pvgpu's, or (native) those of the run
    that leaves the bogus contexts out."""
    return [a for a, asked in _ANSWERS if asked or not native]
