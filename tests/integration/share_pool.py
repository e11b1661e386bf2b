"""Run by test_driver_programs.py: as NVIDIA's streamOrderedAllocationIPC,
a memory pool's shareable descriptor (SCM_RIGHTS) and an exported pointer
go from one process to another of the same VM, which imports, reads, writes
and frees them; a process of another VM imports the pool but not the
pointer: python3 share_pool.py LIBCUDA parent URI OTHER_URI OTHER_TOKEN."""
import ctypes, sys

import share_util
from share_util import check, from_parent, to_children
cu = ctypes.CDLL(sys.argv[1])
vp, u64, sz = ctypes.c_void_p, ctypes.c_uint64, ctypes.c_size_t
class Props(ctypes.Structure):
    _fields_ = [("alloc_type", ctypes.c_uint), ("handle_types", ctypes.c_uint),
                ("ltype", ctypes.c_uint), ("lid", ctypes.c_int), ("security", vp),
                ("max_size", sz), ("usage", ctypes.c_ushort), ("reserved", ctypes.c_ubyte * 54)]
def word(p, off):
    return share_util.word(cu, p, off)
dev, ctx = ctypes.c_int(), vp()
check(cu.cuInit(0), "init")
check(cu.cuDeviceGet(ctypes.byref(dev), 0), "device")
check(cu.cuCtxCreate_v2(ctypes.byref(ctx), 0, dev), "ctx")

if sys.argv[2] == "parent":
    plain, pool, ptr = vp(), vp(), u64()
    fd = ctypes.c_int(-1)
    check(cu.cuMemPoolCreate(ctypes.byref(plain), ctypes.byref(Props(1, 0, 1, 0))), "plain pool")
    outs = [str(cu.cuMemPoolExportToShareableHandle(ctypes.byref(fd), plain, 1, ctypes.c_ulonglong(0)))]
    check(cu.cuMemPoolCreate(ctypes.byref(pool), ctypes.byref(Props(1, 1, 1, 0))), "pool")
    check(cu.cuMemAllocFromPoolAsync(ctypes.byref(ptr), sz(4096), pool, None), "alloc")
    check(cu.cuMemsetD32_v2(ptr, ctypes.c_uint(0x9abc), sz(1024)), "memset")
    check(cu.cuCtxSynchronize(), "sync")
    check(cu.cuMemPoolExportToShareableHandle(ctypes.byref(fd), pool, 1, ctypes.c_ulonglong(0)), "export")
    data = (ctypes.c_ubyte * 64)()
    check(cu.cuMemPoolExportPointer(data, ptr), "export pointer")
    outs += to_children(__file__, sys.argv, bytes(data), fd.value)
    outs.append(word(ptr, 128))
    outs.append(str(cu.cuMemFreeAsync(ptr, None)))
    outs.append(str(cu.cuMemPoolDestroy(pool)))
    print("|".join(outs))
else:
    msg, pool_fd = from_parent(int(sys.argv[3]), 64)
    pool, ptr = vp(), u64()
    out = [str(cu.cuMemPoolImportFromShareableHandle(ctypes.byref(pool), vp(pool_fd), 1,
                                                     ctypes.c_ulonglong(0)))]
    data = (ctypes.c_ubyte * 64).from_buffer_copy(msg)
    r = cu.cuMemPoolImportPointer(ctypes.byref(ptr), pool, data)
    out.append(str(r))
    if r == 0:
        out.append(word(ptr, 0))
        check(cu.cuMemsetD32_v2(u64(ptr.value + 128), ctypes.c_uint(0x1111), sz(1)), "child memset")
        check(cu.cuCtxSynchronize(), "child sync")
        out.append(str(cu.cuMemFreeAsync(ptr, None)))
        out.append(str(cu.cuMemFreeAsync(ptr, None)))
    print(" ".join(out))
