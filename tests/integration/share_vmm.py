"""Run by test_driver_programs.py: VMM memory shared through a shareable
file descriptor (SCM_RIGHTS) between processes of one VM, and refused to
another VM: python3 share_vmm.py LIBCUDA parent URI OTHER_URI OTHER_TOKEN."""
import ctypes, os, sys

import share_util
from share_util import check, from_parent, to_children
cu = ctypes.CDLL(sys.argv[1])
vp, u64, sz = ctypes.c_void_p, ctypes.c_uint64, ctypes.c_size_t
class Prop(ctypes.Structure):
    _fields_ = [("type", ctypes.c_uint), ("handles", ctypes.c_uint), ("ltype", ctypes.c_uint),
                ("lid", ctypes.c_int), ("meta", vp), ("flags", ctypes.c_ubyte * 8)]
class Access(ctypes.Structure):
    _fields_ = [("ltype", ctypes.c_uint), ("lid", ctypes.c_int), ("flags", ctypes.c_uint)]
dev, ctx = ctypes.c_int(), vp()
check(cu.cuInit(0), "init")
check(cu.cuDeviceGet(ctypes.byref(dev), 0), "device")

def mapped(h, size):
    va = u64()
    check(cu.cuMemAddressReserve(ctypes.byref(va), sz(size), sz(0), u64(0), ctypes.c_ulonglong(0)), "reserve")
    check(cu.cuMemMap(va, sz(size), sz(0), h, ctypes.c_ulonglong(0)), "map")
    acc = Access(1, 0, 3)
    check(cu.cuMemSetAccess(va, sz(size), ctypes.byref(acc), sz(1)), "access")
    return va

def word(va, off):
    return share_util.word(cu, va, off)

if sys.argv[2] == "parent":
    # As NVIDIA's memMapIPCDrv: the memory is made and exported with no
    # context current (the parent's contexts are destroyed first).
    check(cu.cuCtxCreate_v2(ctypes.byref(ctx), 0, dev), "ctx")
    check(cu.cuCtxDestroy_v2(ctx), "ctx destroy")
    prop = Prop(1, 1, 1, 0)
    gran, h = sz(), u64()
    check(cu.cuMemGetAllocationGranularity(ctypes.byref(gran), ctypes.byref(prop), 0), "granularity")
    size = gran.value
    check(cu.cuMemCreate(ctypes.byref(h), sz(size), ctypes.byref(prop), ctypes.c_ulonglong(0)), "create")
    fd = ctypes.c_int(-1)
    check(cu.cuMemExportToShareableHandle(ctypes.byref(fd), h, 1, ctypes.c_ulonglong(0)), "export")
    check(cu.cuCtxCreate_v2(ctypes.byref(ctx), 0, dev), "ctx again")
    va = mapped(h, size)
    check(cu.cuMemsetD32_v2(va, ctypes.c_uint(0x5678), sz(size // 4)), "memset")
    check(cu.cuCtxSynchronize(), "sync")
    outs = to_children(__file__, sys.argv, b"h", fd.value)
    outs.append(word(va, 64))
    # A descriptor that is not a shareable handle imports nothing.
    h2 = u64()
    devnull = os.open("/dev/null", os.O_RDONLY)
    outs.append(str(cu.cuMemImportFromShareableHandle(ctypes.byref(h2), vp(devnull), 1)))
    check(cu.cuMemUnmap(va, sz(size)), "unmap")
    check(cu.cuCtxDestroy_v2(ctx), "ctx destroy again")
    outs.append(str(cu.cuMemRelease(h)))
    print("|".join(outs))
else:
    _, vmm_fd = from_parent(int(sys.argv[3]), 16)
    check(cu.cuCtxCreate_v2(ctypes.byref(ctx), 0, dev), "child ctx")
    h = u64()
    r = cu.cuMemImportFromShareableHandle(ctypes.byref(h), vp(vmm_fd), 1)
    out = [str(r)]
    if r == 0:
        prop = Prop(1, 1, 1, 0)
        gran = sz()
        check(cu.cuMemGetAllocationGranularity(ctypes.byref(gran), ctypes.byref(prop), 0), "granularity")
        va = mapped(h, gran.value)
        out.append(word(va, 0))
        check(cu.cuMemsetD32_v2(u64(va.value + 64), ctypes.c_uint(0xabcd), sz(1)), "child memset")
        check(cu.cuCtxSynchronize(), "child sync")
        check(cu.cuMemUnmap(va, gran.value), "child unmap")
        out.append(str(cu.cuMemRelease(h)))
    print(" ".join(out))
