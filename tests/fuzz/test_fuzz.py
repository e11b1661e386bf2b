"""Run the libFuzzer session target for a bounded time (CI: <= 60 s).

The seeds are well-formed sessions written with the generated protocol
description, so the fuzzer starts from inputs that reach deep into the
handlers instead of dying at the first header check.
"""
import os
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
import pvgpu_wire as W  # noqa: E402

REPO = W.REPO
FUZZER = os.path.join(REPO, os.environ.get("PVGPU_BUILD", "build"), "fuzz", "fuzz_worker")


def graph_nodes(image, base, params):
    """Explicit graph nodes (ops.spec graph_*): a graph (handle 4 after the
    module and its function) of memset -> kernel -> memcpy nodes (5, 6, 7),
    an edge, a bad dependency, a kernel node's update in the graph and in
    its executable graph (8), a launch, a clone (9) listed and the
    executable graph updated from it, a node destroyed and used again."""
    h = lambda i: (1 << 24) | i  # noqa: E731
    mod, fn, graph, x = h(2), h(3), h(4), h(8)
    base += 4096            # the sim's first allocation, past its guard gap
    params = base.to_bytes(8, "little") * 3 + params[24:]
    none = dict(func=0, grid_x=0, grid_y=0, grid_z=0, block_x=0, block_y=0, block_z=0,
                shared_bytes=0, params=b"", dst=0, src=0, pitch=0, width=0, height=0,
                value=0, elem_size=0, host=0)
    shape = dict(func=fn, grid_x=2, grid_y=1, grid_z=1, block_x=32, block_y=1, block_z=1,
                 shared_bytes=0, params=params)
    return (W.message("module_load", 60, size=len(image)) + W.data_frames(image, 60)
            + W.message("module_get_function", 61, module=mod, name="vec_add")
            + W.message("driver_call", 62, fn=19, args=[1, 0])
            + W.message("graph_add_node", 63, graph=graph, type=2, deps=[],
                        **dict(none, dst=base, value=7, elem_size=4, width=8, height=1))
            + W.message("graph_add_node", 64, graph=graph, type=0, deps=[h(5)],
                        **dict(none, **shape))
            + W.message("graph_add_node", 65, graph=graph, type=1, deps=[h(6)],
                        **dict(none, dst=base + 2048, src=base, width=64))
            + W.message("graph_add_node", 66, graph=graph, type=5, deps=[h(5), h(5)], **none)
            + W.message("graph_add_deps", 67, graph=graph, **{"from": [h(5)], "to": [h(7)]})
            + W.message("graph_node_get_type", 68, node=h(6))
            + W.message("graph_get_nodes", 69, graph=graph)
            + W.message("graph_kernel_node_set", 70, exec=0, node=h(6), **shape)
            + W.message("driver_call", 71, fn=14, args=[1, graph, 0])
            + W.message("graph_kernel_node_set", 72, exec=x, node=h(6), **shape)
            + W.batch(W.message("driver_call_async", 0, fn=15, args=[x, 0]))
            + W.message("ctx_synchronize", 73)
            + W.message("driver_call", 79, fn=20, args=[1, graph])
            + W.message("graph_get_nodes", 80, graph=h(9))
            + W.message("graph_exec_update", 81, exec=x, graph=h(9))
            + W.message("graph_exec_update", 82, exec=x, graph=x)
            + W.message("driver_call", 74, fn=W.GENERIC["cuGraphDestroyNode"], args=[h(7)])
            + W.message("graph_node_get_type", 75, node=h(7))
            + W.message("driver_call", 76, fn=17, args=[x])
            + W.message("driver_call", 77, fn=18, args=[graph])
            + W.message("graph_node_get_type", 78, node=h(5)))


def seeds():
    hello = W.message("hello", 1, version_min=1, version_max=W.P.VERSION, pid=1,
                      token="", client="seed")
    ctx = W.message("ctx_create", 2, device=0)
    # The backend numbers its first context 1 << 24 | 1.
    set_ctx = W.message("ctx_set", 3, ctx=(1 << 24) | 1)
    alloc = W.message("mem_alloc", 4, size=4096)
    base = 0x7E0000000000
    h2d = W.message("memcpy_htod", 5, dst=base, size=300, stream=0) + W.data_frames(b"x" * 300, 5)
    d2h = W.message("memcpy_dtoh", 6, src=base, size=300, stream=0)
    memset = W.batch(W.message("memset_async", 0, dst=base, value=7, elem_size=4, count=8, stream=0),
                     W.message("driver_call_async", 0, fn=W.GENERIC["cuEventRecord"], args=[5, 0]))
    streams = (W.message("stream_create", 7, flags=1, priority=0)
               + W.message("driver_call", 8, fn=W.GENERIC["cuEventCreate"], args=[1, 0])
               + W.message("driver_call_async", 9, fn=W.GENERIC["cuEventRecord"],
                           args=[(1 << 24) | 3, (1 << 24) | 2])
               + W.message("stream_synchronize", 10, stream=(1 << 24) | 2)
               + W.message("driver_call", 11, fn=W.GENERIC["cuEventElapsedTime_v2"],
                           args=[1, (1 << 24) | 3, (1 << 24) | 3]))
    attrs = W.message("device_get_attributes", 12, device=0, attrs=[1, 2, 16, 75, 76])
    free = W.message("mem_free", 13, dptr=base) + W.message("bye", 14)
    session = hello + ctx + set_ctx + alloc
    # The generic driver call (annotations.py GENERIC): a limit set and
    # read back, a stream write into the allocation and one past its end.
    generic = (W.message("driver_call", 15, fn=1, args=[2, 1 << 20])
               + W.message("driver_call", 16, fn=2, args=[1, 2])
               + W.message("driver_call", 17, fn=3, args=[1, 0])
               + W.batch(W.message("driver_call_async", 0, fn=7, args=[0, base + 8, 5, 0]),
                         W.message("driver_call_async", 0, fn=8, args=[0, base + 4092, 5, 0]))
               + W.message("stream_synchronize", 18, stream=0))
    # Stream capture and a graph: handles the worker's table hands out
    # (stream 2, graph 3, graph exec 4 in this session).
    st = (1 << 24) | 2
    graphs = (W.message("stream_create", 20, flags=1, priority=0)
              + W.message("driver_call", 21, fn=11, args=[st, 0])
              + W.message("driver_call", 22, fn=13, args=[st, 1])
              + W.message("driver_call", 23, fn=12, args=[st, 1])
              + W.message("driver_call", 24, fn=14, args=[1, (1 << 24) | 3, 0])
              + W.batch(W.message("driver_call_async", 0, fn=15, args=[(1 << 24) | 4, st]),
                        W.message("driver_call_async", 0, fn=16, args=[(1 << 24) | 4, 0]))
              + W.message("driver_call", 25, fn=17, args=[(1 << 24) | 4])
              + W.message("driver_call", 26, fn=18, args=[(1 << 24) | 3]))
    # Modules and launches: an image the sim parses (the build's cubin and
    # PTX of vecadd.cu), its function, plain launches and launches with
    # attributes, good ones and ones the worker must refuse (module 2,
    # function 3 in this session).
    modules = {}
    for kind in ("cubin", "ptx"):
        path = os.path.join(REPO, os.environ.get("PVGPU_BUILD", "build"), "tests",
                            "kernels", "images", "vecadd." + kind)
        if not os.path.exists(path):
            continue
        image = open(path, "rb").read()
        mod, fn = (1 << 24) | 2, (1 << 24) | 3
        params = base.to_bytes(8, "little") * 3 + (64).to_bytes(4, "little")
        shape = dict(func=fn, grid_x=2, grid_y=1, grid_z=1, block_x=32, block_y=1,
                     block_z=1, shared_bytes=0, stream=0)
        modules["module_" + kind] = (
            session
            + W.message("module_load", 30, size=len(image)) + W.data_frames(image, 30)
            + W.message("module_get_function", 31, module=mod, name="vec_add")
            + W.message("driver_call", 32, fn=W.GENERIC["cuFuncGetAttribute"],
                        args=[1, 0, fn])
            + W.message("driver_call", 33,
                        fn=W.GENERIC["cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags"],
                        args=[1, fn, 128, 0, 0])
            + W.message("driver_call", 36, fn=W.GENERIC["cuFuncSetAttribute"],
                        args=[fn, 8, 1024])
            + W.message("driver_call", 37,
                        fn=W.GENERIC["cuOccupancyAvailableDynamicSMemPerBlock"],
                        args=[1, fn, 2, 128])
            + W.batch(W.message("launch_kernel", 0, params=params, **shape),
                      W.message("launch_kernel_ex", 0, attrs=[4, 2, 1, 1, 8, 0, 0, 0],
                                params=params, **shape),
                      W.message("launch_kernel_ex", 0, attrs=[2, 1, 0, 0], params=params,
                                **shape),
                      W.message("launch_kernel_ex", 0, attrs=[7, 1, 0, 0, 4, 3], params=params,
                                **shape))
            + W.message("ctx_synchronize", 34)
            + W.message("module_unload", 35, module=mod) + free)
        if kind == "cubin":
            modules["graph_nodes"] = session + graph_nodes(image, base, params)
    # CUDA arrays: one made (handle 2 after the context), a box in and out
    # of the allocation, one past its rows, a destroy and a stale use.
    arr = (1 << 24) | 2
    box = dict(array=arr, x=4, y=1, z=0, width=16, height=2, depth=1, dptr=base,
               pitch=64, rows=0, stream=0)
    arrays = (W.message("array_create", 40, width=37, height=5, depth=0, format=0x20,
                        channels=1, flags=0)
              + W.message("array_copy", 41, to_array=1, **box)
              + W.message("array_copy", 42, to_array=0, **box)
              + W.message("array_copy", 43, to_array=0, **dict(box, y=4))
              + W.message("array_create", 44, width=8, height=8, depth=8, format=0x01,
                          channels=4, flags=0)
              + W.message("driver_call", 45, fn=W.GENERIC["cuArrayDestroy"], args=[arr])
              + W.message("array_copy", 46, to_array=1, **box))
    # Structures through the generic call (a stream attribute set and read
    # back) and a JIT link of one PTX input, fetched.
    ptx = b".version 8.0\n.target sm_90\n.address_size 64\n\0"
    structs = (W.message("stream_create", 30, flags=1, priority=0)
               + W.message("driver_call_data", 31, fn=202, args=[st, 3, 1],
                           input=b"\3" + bytes(63))
               + W.message("driver_call_data", 32, fn=203, args=[st, 3, 1], input=b""))
    link = (W.message("link_complete", 33, opt_key=[2, 3, 4], opt_value=[0, 1, 256],
                      input_type=[1], input_size=[len(ptx)], size=len(ptx))
            + W.data_frames(ptx, 33)
            + W.message("link_fetch", 34, link=(1 << 24) | 3, size=len(ptx))
            + W.message("module_load_jit", 35, opt_key=[2, 3, 4, 0], opt_value=[0, 1, 64, 32],
                        size=len(ptx))
            + W.data_frames(ptx, 35))
    # Virtual memory: a range reserved, physical memory made (its
    # CUmemAllocationProp: pinned, device 0), mapped, given access,
    # unmapped, released, the range freed.
    G = 2 << 20
    prop = bytes([1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0]) + bytes(16)
    va = base + 0x200000
    vmm = (W.message("driver_call", 40, fn=207, args=[1, 4 * G, 0, 0, 0])
           + W.message("driver_call_data", 41, fn=205, args=[1, G, 1, 0], input=prop)
           + W.message("driver_call", 42, fn=209, args=[va, G, 0, (1 << 24) | 3, 0])
           + W.message("driver_call_data", 43, fn=211, args=[va, G, 1, 1],
                       input=bytes([1, 0, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0]))
           + W.message("driver_call", 44, fn=210, args=[va, G])
           + W.message("vmm_export", 47, handle=(1 << 24) | 3, type=1)
           + W.message("vmm_import", 48, token=bytes(16), type=1)
           + W.message("vmm_import", 49, token=b"short", type=2)
           + W.message("driver_call", 45, fn=206, args=[(1 << 24) | 3])
           + W.message("driver_call", 46, fn=208, args=[va, 4 * G]))
    # CUDA IPC: a handle for the allocation, opened (in this same session),
    # closed; a forged one.  An interprocess event (handle 2) exported, a
    # forged event token and a short one.
    ipc = (W.message("ipc_get_mem_handle", 50, dptr=base)
           + W.message("ipc_open_mem_handle", 51, handle=bytes(64), flags=1)
           + W.message("ipc_close_mem_handle", 52, dptr=base)
           + W.message("driver_call", 53, fn=W.GENERIC["cuEventCreate"], args=[1, 6])
           + W.message("ipc_get_event_handle", 54, event=(1 << 24) | 2)
           + W.message("ipc_open_event_handle", 55, handle=bytes(64))
           + W.message("ipc_open_event_handle", 56, handle=b"tok"))
    # Texture and surface objects: on a load/store array, on linear and
    # pitched memory, destroyed by the sim's value (kind 9 << 48 | serial)
    # and by forged ones; a cubemap and a layered array with a face copy.
    tex = dict(address0=1, address1=1, address2=0, filter=1, flags=2, max_aniso=0,
               mip_filter=0, mip_bias=0.0, mip_min=0.0, mip_max=1.0, border0=0.0,
               border1=0.0, border2=0.0, border3=1.0, res_flags=0)
    res = dict(format=0, channels=0, width=0, height=0, pitch=0, size=0)
    textures = (W.message("array_create", 50, width=16, height=16, depth=0, format=0x20,
                          channels=1, flags=0x02)
                + W.message("tex_create", 51, res_type=0, handle=arr, **res, **tex)
                + W.message("tex_create", 52, res_type=2, handle=base,
                            **dict(res, format=0x20, channels=1, size=256), **tex)
                + W.message("tex_create", 53, res_type=3, handle=base,
                            **dict(res, format=0x01, channels=4, width=8, height=4,
                                   pitch=64), **tex)
                + W.message("surf_create", 54, array=arr)
                + W.message("driver_call", 55, fn=W.GENERIC["cuTexObjectDestroy"],
                            args=[(9 << 48) | 4])
                + W.message("driver_call", 56, fn=W.GENERIC["cuSurfObjectDestroy"],
                            args=[(10 << 48) | 7])
                + W.message("driver_call", 57, fn=W.GENERIC["cuTexObjectDestroy"],
                            args=[0xdeadbeef])
                + W.message("array_create", 58, width=8, height=8, depth=12, format=0x20,
                            channels=2, flags=0x05)
                + W.message("array_copy", 59, to_array=1, **dict(box, array=(1 << 24) | 3,
                                                                   z=11, width=32, height=8))
                + W.message("array_create", 60, width=64, height=0, depth=3, format=0x20,
                            channels=1, flags=0x01))
    tmap = dict(dtype=7, rank=2, dims=[64, 32], strides=[256], box=[16, 8], lower=[],
                upper=[], channels=0, pixels=0, elem_strides=[1, 1], interleave=0,
                swizzle=0, l2=0, oob=0)
    tensor_maps = (W.message("tensor_map_encode", 70, im2col=0, address=base, **tmap)
                   + W.message("tensor_map_encode", 71, im2col=1, address=base,
                               **dict(tmap, rank=3, dims=[8, 8, 8], strides=[32, 256],
                                      box=[], lower=[0], upper=[0], channels=8, pixels=8,
                                      elem_strides=[1, 1, 1]))
                   + W.message("tensor_map_encode", 72, im2col=0, address=base,
                               **dict(tmap, rank=4)))
    # Staged graph copies and capture queries (capture.c): a graph with a
    # host-to-device and a device-to-host staged node (buffers 1, 2), its
    # executable graph fed, launched and read back; a capture queried, a
    # staged copy captured, its dependencies replaced.
    h = lambda i: (1 << 24) | i  # noqa: E731
    staged = (W.message("stream_create", 90, flags=1, priority=0)
              + W.message("driver_call", 91, fn=19, args=[1, 0])
              + W.message("graph_staged_copy", 92, graph=h(3), deps=[], stream=0,
                          dptr=base, size=64, to_host=0)
              + W.message("graph_staged_copy", 93, graph=h(3), deps=[h(4)], stream=0,
                          dptr=base + 64, size=64, to_host=1)
              + W.message("driver_call", 94, fn=14, args=[1, h(3), 0])
              + W.message("graph_staged_put", 95, staging=[1], size=64)
              + W.data_frames(b"y" * 64, 95)
              + W.batch(W.message("driver_call_async", 0, fn=15, args=[h(6), h(2)]))
              + W.message("stream_synchronize", 96, stream=h(2))
              + W.message("graph_staged_get", 97, staging=[2], size=64)
              + W.message("driver_call", 98, fn=11, args=[h(2), 0])
              + W.message("stream_capture_info", 99, stream=h(2))
              + W.message("graph_staged_copy", 100, graph=0, deps=[], stream=h(2),
                          dptr=base, size=16, to_host=1)
              + W.message("stream_capture_info", 101, stream=h(2))
              + W.message("stream_capture_deps", 102, stream=h(2), deps=[h(8)], edges=[],
                          flags=1)
              + W.message("driver_call", 103, fn=12, args=[h(2), 1])
              + W.message("driver_call", 104, fn=17, args=[h(6)])
              + W.message("driver_call", 105, fn=18, args=[h(3)]))
    # Graph memory: an allocation node, a free node of its address and one
    # of other memory, the attributes and a trim; the same captured.
    graph_mem = (W.message("stream_create", 110, flags=1, priority=0)
                 + W.message("driver_call", 111, fn=19, args=[1, 0])
                 + W.message("graph_mem_node", 112, graph=h(3), deps=[], size=4096, dptr=0)
                 + W.message("graph_mem_node", 113, graph=h(3), deps=[h(4)], size=0,
                             dptr=base + (1 << 20))
                 + W.message("graph_mem_node", 114, graph=h(3), deps=[], size=0, dptr=base)
                 + W.message("driver_call_data", 115,
                             fn=W.GENERIC["cuDeviceGetGraphMemAttribute"], args=[0, 0, 1],
                             input=b"")
                 + W.message("driver_call_data", 116,
                             fn=W.GENERIC["cuDeviceSetGraphMemAttribute"], args=[0, 1, 1],
                             input=bytes(8))
                 + W.message("driver_call", 117, fn=W.GENERIC["cuDeviceGraphMemTrim"],
                             args=[0])
                 + W.message("driver_call", 118, fn=11, args=[h(2), 0])
                 + W.message("stream_mem_async", 119, stream=h(2), size=256, dptr=0)
                 + W.message("stream_mem_async", 120, stream=h(2), size=0, dptr=base)
                 + W.message("driver_call", 121, fn=12, args=[h(2), 1]))
    # Conditional nodes: a handle of graph 3, an IF node with two bodies on
    # it, a node on a made-up handle, one with too many bodies.
    cond = (W.message("driver_call", 130, fn=19, args=[1, 0])
            + W.message("graph_cond_handle", 131, graph=h(2), default_value=1, flags=1)
            + W.message("graph_cond_node", 132, graph=h(2), deps=[], handle=1, type=0,
                        size=2)
            + W.message("graph_cond_node", 133, graph=h(2), deps=[], handle=0x5eed, type=1,
                        size=1)
            + W.message("graph_cond_node", 134, graph=h(2), deps=[], handle=1, type=2,
                        size=65)
            + W.message("graph_get_nodes", 135, graph=h(5))
            + W.message("driver_call", 136, fn=18, args=[h(2)])
            + W.message("graph_get_nodes", 137, graph=h(5)))
    # Managed memory: a window named at the guest's address (no file
    # descriptor comes with a fuzzed session, so it is refused), managed
    # parts good and bad, one given back.
    managed = (W.message("window_attach", 61, size=64 << 20, window_id=0,
                         ring_offset=0, ring_size=0, guest_base=0x7F0000000000)
               + W.message("managed_alloc", 62, offset=8 << 20, size=1 << 20, flags=1)
               + W.message("managed_alloc", 63, offset=(64 << 20) - 4096, size=8192, flags=2)
               + W.message("managed_alloc", 64, offset=1, size=1 << 63, flags=7)
               + W.message("window_unregister", 65, offset=8 << 20))
    # Clones and capture into a graph: a graph with a staged copy node,
    # cloned, the node found in the clone (twice: one buffer), a made-up
    # one; a capture into the graph after the node, ended; one into a
    # made-up graph, one with edges not matching its deps.
    clone = (W.message("stream_create", 140, flags=1, priority=0)
             + W.message("driver_call", 141, fn=19, args=[1, 0])
             + W.message("graph_staged_copy", 142, graph=h(3), deps=[], stream=0,
                         dptr=base, size=64, to_host=1)
             + W.message("driver_call", 143, fn=20, args=[1, h(3)])
             + W.message("graph_clone_node", 144, clone=h(5), node=h(4))
             + W.message("graph_clone_node", 145, clone=h(5), node=h(4))
             + W.message("graph_clone_node", 146, clone=h(5), node=0x5eed)
             + W.message("stream_capture_to_graph", 147, stream=h(2), graph=h(3),
                         deps=[h(4)], edges=[], mode=0)
             + W.message("driver_call", 148, fn=12, args=[h(2), 1])
             + W.message("stream_capture_to_graph", 149, stream=h(2), graph=0x5eed,
                         deps=[], edges=[], mode=2)
             + W.message("stream_capture_to_graph", 150, stream=h(2), graph=h(3),
                         deps=[h(4)], edges=[0, 0], mode=7)
             + W.message("driver_call", 151, fn=18, args=[h(3)])
             + W.message("driver_call", 152, fn=18, args=[h(5)]))
    # Every generic call once, by id, with made-up handles and every
    # result wanted: the worker's checks in front of each.
    each = b""
    for i, (fid, (types, is_async)) in enumerate(sorted(W.GENERIC_ARGS.items())):
        args = [1] * len(types)
        if is_async:
            each += W.batch(W.message("driver_call_async", 0, fn=fid, args=args))
        elif any(t.startswith(("const_", "in_", "out_")) for t in types):
            each += W.message("driver_call_data", 200 + i, fn=fid, args=args, input=b"")
        else:
            each += W.message("driver_call", 200 + i, fn=fid, args=args)
    return {
        "generic_each": session + each + free,
        **modules,
        "clone": session + clone + free,
        "tensor_maps": session + tensor_maps + free,
        "staged": session + staged + free,
        "graph_mem": session + graph_mem + free,
        "cond": session + cond + free,
        "managed": session + managed + free,
        "textures": session + textures + free,
        "arrays": session + arrays + free,
        "hello": hello,
        # The resume fields: a token this worker never gave (refused), and
        # a hello that offers the feature, then a session on it.
        "hello_resume": W.message("hello", 1, version_min=1, version_max=W.P.VERSION,
                                  pid=1, token="", client="seed",
                                  features=(1 << 9) | 3, resume_lo=0x1234,
                                  resume_hi=1 << 63, last_reply=7) + ctx,
        "hello_offers_resume": W.message("hello", 1, version_min=1,
                                         version_max=W.P.VERSION, pid=1, token="",
                                         client="seed", features=(1 << 9) | 3)
        + ctx + set_ctx + alloc + d2h + free,
        "ipc": session + ipc + free,
        "vmm": session + vmm + free,
        "structs": session + structs + free,
        "link": session + link + free,
        "copies": session + h2d + d2h + free,
        "batch": session + memset + d2h,
        "streams": session + streams + attrs,
        "generic": session + generic + free,
        "graphs": session + graphs + free,
        "devices": hello + attrs + W.message("device_get_name", 2, device=0)
        + W.message("device_get_uuid", 3, device=0) + W.message("mem_get_info", 4),
    }


def test_every_generic_call_has_a_seed(monkeypatch):
    """Each id of the generic driver call reaches the fuzzer in a seed."""
    seen = set()
    message = W.message

    def spy(op, msg_id=1, **values):
        if op.startswith("driver_call"):
            seen.add(values["fn"])
        return message(op, msg_id, **values)

    monkeypatch.setattr(W, "message", spy)
    seeds()
    assert set(W.GENERIC_ARGS) - seen == set()


@pytest.mark.skipif(not os.path.exists(FUZZER),
                    reason="fuzzer not built (make fuzz needs clang with libFuzzer)")
def test_fuzz_worker_survives_hostile_sessions(tmp_path):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for name, raw in seeds().items():
        (corpus / name).write_bytes(raw)
    seconds = int(os.environ.get("PVGPU_FUZZ_SECONDS", "30"))
    proc = subprocess.run(
        [FUZZER, f"-max_total_time={seconds}", "-timeout=10", "-rss_limit_mb=4096",
         "-max_len=262144", str(corpus)],
        cwd=tmp_path, capture_output=True, text=True, timeout=seconds + 120)
    tail = proc.stderr[-4000:]
    assert proc.returncode == 0, f"fuzzer found a failure:\n{tail}"
    assert "Done" in proc.stderr, tail
    assert not list(tmp_path.glob("crash-*")), tail


RING_FUZZER = os.path.join(REPO, os.environ.get("PVGPU_BUILD", "build"), "fuzz", "fuzz_ring")


@pytest.mark.skipif(not os.path.exists(RING_FUZZER),
                    reason="fuzzer not built (make fuzz needs clang with libFuzzer)")
def test_fuzz_ring_survives_a_scribbling_guest(tmp_path):
    seconds = int(os.environ.get("PVGPU_FUZZ_SECONDS", "30")) // 2 or 1
    proc = subprocess.run(
        [RING_FUZZER, f"-max_total_time={seconds}", "-timeout=10", "-rss_limit_mb=2048",
         "-max_len=4096"],
        cwd=tmp_path, capture_output=True, text=True, timeout=seconds + 120)
    tail = proc.stderr[-4000:]
    assert proc.returncode == 0, f"fuzzer found a failure:\n{tail}"
    assert "Done" in proc.stderr, tail
    assert not list(tmp_path.glob("crash-*")), tail


ADMIN_FUZZER = os.path.join(REPO, os.environ.get("PVGPU_BUILD", "build"), "fuzz", "fuzz_admin")


@pytest.mark.skipif(not os.path.exists(ADMIN_FUZZER),
                    reason="fuzzer not built (make fuzz needs clang with libFuzzer)")
def test_fuzz_admin_parser_takes_only_requests(tmp_path):
    """pvgpud's admin socket parser (admin.h), from seeds of each request."""
    seconds = int(os.environ.get("PVGPU_FUZZ_SECONDS", "30")) // 3 or 1
    seeds = tmp_path / "seeds"
    seeds.mkdir()
    for i, seed in enumerate((b"list", b"suspend 12", b"resume 9223372036854775807")):
        (seeds / f"seed{i}").write_bytes(seed)
    proc = subprocess.run(
        [ADMIN_FUZZER, f"-max_total_time={seconds}", "-timeout=10", "-max_len=128",
         str(seeds)],
        cwd=tmp_path, capture_output=True, text=True, timeout=seconds + 120)
    tail = proc.stderr[-4000:]
    assert proc.returncode == 0, f"fuzzer found a failure:\n{tail}"
    assert "Done" in proc.stderr, tail
    assert not list(tmp_path.glob("crash-*")), tail
