"""Explicit graph nodes on the wire (ops.spec graph_*), spoken directly
(tests/lib/pvgpu_wire.py) against `pvgpud --executor sim`: a graph of
memset and memcpy nodes built, instantiated and launched computes what its
nodes say; every node id, graph id, range and field a guest sends is
checked by the worker, and a bad one is a CUDA error for that session
only (it goes on working).  The driver API's view, with kernel nodes, is
test_graph_nodes.py.
"""
import os
import struct
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
import pvgpu_wire as W  # noqa: E402

from curesult import (  # noqa: E402
    CUDA_SUCCESS, CUDA_ERROR_INVALID_VALUE, CUDA_ERROR_INVALID_HANDLE,
    CUDA_ERROR_NOT_SUPPORTED)
KERNEL, MEMCPY, MEMSET, HOST, EMPTY = 0, 1, 2, 3, 5
GRAPH_CREATE, INSTANTIATE, LAUNCH, EXEC_DESTROY, GRAPH_DESTROY = 19, 14, 15, 17, 18
NONE = dict(func=0, grid_x=0, grid_y=0, grid_z=0, block_x=0, block_y=0, block_z=0,
            shared_bytes=0, params=b"", dst=0, src=0, pitch=0, width=0, height=0,
            value=0, elem_size=0, host=0)


@pytest.fixture
def daemon(start_pvgpud):
    return start_pvgpud("sim")


def session(daemon):
    s = W.Session(daemon.unix)
    s.hello()
    s.open_context()
    return s


@pytest.fixture
def s(daemon):
    return session(daemon)


def driver(s, fn, *args):
    st, _, out, _ = s.call("driver_call", fn=fn, args=list(args))
    return st, out.get("results", [])


def graph(s):
    st, res = driver(s, GRAPH_CREATE, 1, 0)
    assert st == CUDA_SUCCESS and res[0]
    return res[0]


def add(s, g, type_, deps=(), **fields):
    st, _, out, _ = s.call("graph_add_node", graph=g, type=type_, deps=list(deps),
                           **dict(NONE, **fields))
    return st, out.get("node", 0)


def alloc(s, size):
    st, _, out, _ = s.call("mem_alloc", size=size)
    assert st == CUDA_SUCCESS
    return out["dptr"]


def node_type(s, node):
    st, _, out, _ = s.call("graph_node_get_type", node=node)
    return st, out.get("type")


def test_memset_then_memcpy(s):
    """Two rows set, then copied after them, on every launch."""
    g = graph(s)
    buf = alloc(s, 4096)
    st, m = add(s, g, MEMSET, dst=buf, pitch=64, value=0x01020304, elem_size=4,
                width=4, height=2)
    assert st == CUDA_SUCCESS
    st, c = add(s, g, MEMCPY, deps=[m], dst=buf + 1024, src=buf, width=80)
    assert st == CUDA_SUCCESS
    st, e = add(s, g, EMPTY, deps=[m, c])
    assert st == CUDA_SUCCESS
    assert [node_type(s, n) for n in (m, c, e)] == [(0, MEMSET), (0, MEMCPY), (0, EMPTY)]
    st, _, out, _ = s.call("graph_get_nodes", graph=g)
    assert st == CUDA_SUCCESS and out["count"] == 3 and sorted(out["nodes"]) == sorted([m, c, e])
    st, res = driver(s, INSTANTIATE, 1, g, 0)
    assert st == CUDA_SUCCESS
    x = res[0]
    for _ in range(2):
        s.send(W.batch(W.message("driver_call_async", 0, fn=LAUNCH, args=[x, 0])))
        assert s.call("ctx_synchronize")[0] == CUDA_SUCCESS
        st, _, _, back = s.call("memcpy_dtoh", src=buf + 1024, size=80, stream=0)
        assert st == CUDA_SUCCESS
        words = struct.unpack("<20I", back)
        assert words[:4] == (0x01020304,) * 4 and words[4:16] == (0,) * 12
        assert words[16:] == (0x01020304,) * 4
        assert s.call("memcpy_htod", data_in=b"\0" * 80,
                      dst=buf + 1024, size=80, stream=0)[0] == CUDA_SUCCESS
    assert driver(s, EXEC_DESTROY, x)[0] == CUDA_SUCCESS
    assert driver(s, GRAPH_DESTROY, g)[0] == CUDA_SUCCESS
    # The graph's nodes went with it.
    assert node_type(s, m)[0] == CUDA_ERROR_INVALID_HANDLE


def test_hostile_nodes(daemon, s):
    g, other = graph(s), graph(s)
    buf = alloc(s, 4096)
    ok, m = add(s, g, MEMSET, dst=buf, value=1, elem_size=1, width=16, height=1)
    assert ok == CUDA_SUCCESS
    _, o = add(s, other, EMPTY)
    bad = [
        add(s, 0x12345, EMPTY),                                   # no such graph
        add(s, m, EMPTY),                                         # a node, not a graph
        add(s, g, EMPTY, deps=[o]),                               # another graph's node
        add(s, g, EMPTY, deps=[m, m]),                            # repeated
        add(s, g, EMPTY, deps=[0x7777] * 512),                    # made up, many
        add(s, g, 99),                                            # no such type
        add(s, g, HOST),                                          # not carried
        add(s, g, EMPTY, dst=buf),                                # stray field
        add(s, g, MEMSET, dst=buf, elem_size=3, width=1, height=1),
        add(s, g, MEMSET, dst=buf, value=0x100, elem_size=1, width=1, height=1),
        add(s, g, MEMSET, dst=buf, elem_size=4, width=1 << 62, height=1),
        add(s, g, MEMSET, dst=buf, elem_size=4, width=1024, height=2, pitch=4096),
        add(s, g, MEMSET, dst=buf, elem_size=4, width=4, height=2, pitch=8),
        add(s, g, MEMSET, dst=buf, elem_size=4, width=1, height=1 << 40, pitch=1 << 40),
        add(s, g, MEMSET, dst=buf, elem_size=4, width=1, height=0),
        add(s, g, MEMSET, dst=buf, elem_size=4, width=1, height=1, func=1),
        add(s, g, MEMCPY, dst=buf, src=buf + 4000, width=200),   # past the end
        add(s, g, MEMCPY, dst=0xdead0000, src=buf, width=8),      # not the session's
        add(s, g, MEMCPY, dst=buf, src=buf, width=8, pitch=8),
        add(s, g, MEMCPY, dst=buf, src=buf, width=8, host=3),
        add(s, g, MEMCPY, dst=8192, src=buf, width=8, host=1),  # no window here
        add(s, g, MEMSET, dst=buf, elem_size=4, width=1, height=1, host=1),
        add(s, g, KERNEL, func=0x5555, grid_x=1, grid_y=1, grid_z=1, block_x=1,
            block_y=1, block_z=1),                                # no such function
    ]
    assert [st for st, _ in bad] == [
        CUDA_ERROR_INVALID_HANDLE, CUDA_ERROR_INVALID_HANDLE] + [CUDA_ERROR_INVALID_VALUE] * 3 + [
        CUDA_ERROR_NOT_SUPPORTED, CUDA_ERROR_NOT_SUPPORTED] + [CUDA_ERROR_INVALID_VALUE] * 15 + [
        CUDA_ERROR_INVALID_HANDLE]
    assert not any(n for _, n in bad)
    edges = lambda f, t: s.call("graph_add_deps", graph=g, **{"from": f, "to": t})[0]  # noqa: E731
    assert edges([m], [m]) == CUDA_ERROR_INVALID_VALUE            # onto itself
    assert edges([m], [o]) == CUDA_ERROR_INVALID_VALUE            # across graphs
    assert edges([m, m], [m]) == CUDA_ERROR_INVALID_VALUE         # counts differ
    kset = dict(grid_x=1, grid_y=1, grid_z=1, block_x=1, block_y=1, block_z=1,
                shared_bytes=0, params=b"", func=0x5555)
    assert s.call("graph_kernel_node_set", exec=0, node=m, **kset)[0] == CUDA_ERROR_INVALID_VALUE
    assert s.call("graph_kernel_node_set", exec=0x999, node=m,
                  **kset)[0] == CUDA_ERROR_INVALID_HANDLE
    assert node_type(s, g)[0] == CUDA_ERROR_INVALID_HANDLE        # a graph, not a node
    assert s.call("graph_get_nodes", graph=m)[0] == CUDA_ERROR_INVALID_HANDLE
    # Another session cannot name this one's nodes or graphs.
    t = session(daemon)
    assert node_type(t, m)[0] == CUDA_ERROR_INVALID_HANDLE
    assert add(t, g, EMPTY)[0] == CUDA_ERROR_INVALID_HANDLE
    assert t.driver("cuGraphDestroyNode", m)[0] == CUDA_ERROR_INVALID_HANDLE
    t.close()
    assert s.driver("cuGraphDestroyNode", o)[0] == CUDA_SUCCESS
    assert s.driver("cuGraphDestroyNode", o)[0] == CUDA_ERROR_INVALID_HANDLE
    # After all that, the session still works.
    assert node_type(s, m) == (CUDA_SUCCESS, MEMSET)
    st, res = driver(s, INSTANTIATE, 1, g, 0)
    assert st == CUDA_SUCCESS
    s.send(W.batch(W.message("driver_call_async", 0, fn=LAUNCH, args=[res[0], 0])))
    assert s.call("ctx_synchronize")[0] == CUDA_SUCCESS
    st, _, _, back = s.call("memcpy_dtoh", src=buf, size=16, stream=0)
    assert st == CUDA_SUCCESS and back == b"\x01" * 16


def test_a_cycle_is_refused_at_instantiate(s):
    g = graph(s)
    _, a = add(s, g, EMPTY)
    _, b = add(s, g, EMPTY, deps=[a])
    assert s.call("graph_add_deps", graph=g, **{"from": [b], "to": [a]})[0] == CUDA_SUCCESS
    assert s.call("graph_add_deps", graph=g, **{"from": [b], "to": [a]})[0] == \
        CUDA_ERROR_INVALID_VALUE                                  # already there
    assert driver(s, INSTANTIATE, 1, g, 0)[0] == CUDA_ERROR_INVALID_VALUE


def put(s, staging, data):
    """graph_staged_put, queued as the guest queues it before a launch."""
    msg_id = s.next_id
    s.next_id += 1
    s.send(W.message("graph_staged_put", msg_id, staging=staging, size=len(data))
           + W.data_frames(data, msg_id))


def test_staged_copy_buffers_are_checked(s):
    """Copy nodes whose host end the worker cannot see (capture.c): the
    bytes a guest puts before a launch come out of the device-to-host node
    after it; a buffer of the wrong direction, size or a made-up one is
    CUDA_ERROR_INVALID_VALUE for that call (the session goes on); a buffer
    lives while an executable graph made with it does."""
    g = graph(s)
    buf = alloc(s, 4096)
    st, _, up, _ = s.call("graph_staged_copy", graph=g, deps=[], stream=0, dptr=buf,
                          size=64, to_host=0)
    assert st == CUDA_SUCCESS and up["staging"], st
    st, _, down, _ = s.call("graph_staged_copy", graph=g, deps=[up["node"]], stream=0,
                            dptr=buf, size=64, to_host=1)
    assert st == CUDA_SUCCESS, st
    assert node_type(s, down["node"]) == (CUDA_SUCCESS, MEMCPY)
    # Past the allocation, a made-up graph, a repeated or foreign dependency.
    bad = dict(stream=0, size=64, to_host=0)
    assert s.call("graph_staged_copy", graph=g, deps=[], dptr=buf + 4090,
                  **bad)[0] == CUDA_ERROR_INVALID_VALUE
    assert s.call("graph_staged_copy", graph=g + 77, deps=[], dptr=buf,
                  **bad)[0] == CUDA_ERROR_INVALID_HANDLE
    assert s.call("graph_staged_copy", graph=g, deps=[up["node"], up["node"]], dptr=buf,
                  **bad)[0] == CUDA_ERROR_INVALID_VALUE
    g2 = graph(s)
    assert s.call("graph_staged_copy", graph=g2, deps=[up["node"]], dptr=buf,
                  **bad)[0] == CUDA_ERROR_INVALID_VALUE
    # Not capturing: no captured copy either.
    assert s.call("graph_staged_copy", graph=0, deps=[], dptr=buf,
                  **bad)[0] != CUDA_SUCCESS
    st, res = driver(s, INSTANTIATE, 1, g, 0)
    assert st == CUDA_SUCCESS
    x = res[0]
    put(s, [up["staging"]], b"q" * 64)
    s.queue("driver_call_async", fn=LAUNCH, args=[x, 0])
    st, deferred, _, data = s.call("graph_staged_get", staging=[down["staging"]], size=64)
    assert (st, deferred, data) == (CUDA_SUCCESS, CUDA_SUCCESS, b"q" * 64)
    # Into a device-to-host buffer: refused when it comes (deferred).
    put(s, [down["staging"]], b"x" * 64)
    st, deferred, _, data = s.call("graph_staged_get", staging=[down["staging"]], size=64)
    assert (st, deferred, data) == (CUDA_SUCCESS, CUDA_ERROR_INVALID_VALUE, b"q" * 64)
    put(s, [up["staging"]], b"x" * 65)                  # more than the buffer
    put(s, [12345], b"x" * 64)                          # made up
    for staging, size in (([up["staging"]], 64), ([down["staging"]], 65),
                          ([12345], 64), ([down["staging"], down["staging"]], 128)):
        st, *_ = s.call("graph_staged_get", staging=staging, size=size)
        assert st == CUDA_ERROR_INVALID_VALUE, (staging, size, st)
    # The graph gone, its executable graph still holds the buffers.
    assert driver(s, GRAPH_DESTROY, g)[0] == CUDA_SUCCESS
    st, _, _, data = s.call("graph_staged_get", staging=[down["staging"]], size=64)
    assert (st, data) == (CUDA_SUCCESS, b"q" * 64)
    assert driver(s, EXEC_DESTROY, x)[0] == CUDA_SUCCESS
    st, *_ = s.call("graph_staged_get", staging=[down["staging"]], size=64)
    assert st == CUDA_ERROR_INVALID_VALUE
    assert s.call("mem_free", dptr=buf)[0] == CUDA_SUCCESS


CLONE, END_CAPTURE = 20, 12


def test_clone_nodes_and_capture_into_a_graph_are_checked(daemon, s):
    """graph_clone_node (capture.c): the clone's node for a node of the
    graph it was cloned from, a staged copy's with a buffer of its own,
    made once (asked again, the same); the original graph, a made-up node
    or another session's are refused.  stream_capture_to_graph: only the
    session's graph, nodes of that graph, one edge per dependency, a
    capture mode; cuStreamEndCapture then gives that graph."""
    g = graph(s)
    buf = alloc(s, 4096)
    st, _, up, _ = s.call("graph_staged_copy", graph=g, deps=[], stream=0, dptr=buf,
                          size=64, to_host=0)
    assert st == CUDA_SUCCESS
    st, _, down, _ = s.call("graph_staged_copy", graph=g, deps=[up["node"]], stream=0,
                            dptr=buf, size=64, to_host=1)
    assert st == CUDA_SUCCESS
    _, e = add(s, g, EMPTY, deps=[down["node"]])
    st, res = driver(s, CLONE, 1, g)
    assert st == CUDA_SUCCESS and res[0] and res[0] != g
    cl = res[0]

    def find(node, clone=cl, sess=s):
        st, _, out, _ = sess.call("graph_clone_node", clone=clone, node=node)
        return st, out.get("node", 0), out.get("staging", 0)

    st, cup, s_up = find(up["node"])
    assert st == CUDA_SUCCESS and cup not in (0, up["node"])
    assert s_up and s_up not in (up["staging"], down["staging"])
    assert find(up["node"]) == (CUDA_SUCCESS, cup, s_up)      # one buffer
    st, cdown, s_down = find(down["node"])
    assert st == CUDA_SUCCESS and s_down not in (0, s_up, down["staging"])
    st, ce, s_e = find(e)
    assert st == CUDA_SUCCESS and s_e == 0 and node_type(s, ce) == (CUDA_SUCCESS, EMPTY)
    assert find(up["node"], clone=g)[0] == CUDA_ERROR_INVALID_HANDLE   # not a clone of g
    assert find(0x7777)[0] == CUDA_ERROR_INVALID_HANDLE
    assert find(up["node"], clone=up["node"])[0] == CUDA_ERROR_INVALID_HANDLE
    t = session(daemon)
    assert find(up["node"], sess=t)[0] == CUDA_ERROR_INVALID_HANDLE
    t.close()
    # The clone runs with its own buffers: the original's stay as they were.
    st, res = driver(s, INSTANTIATE, 1, cl, 0)
    assert st == CUDA_SUCCESS
    put(s, [s_up], b"c" * 64)
    s.queue("driver_call_async", fn=LAUNCH, args=[res[0], 0])
    st, deferred, _, data = s.call("graph_staged_get", staging=[s_down], size=64)
    assert (st, deferred, data) == (CUDA_SUCCESS, CUDA_SUCCESS, b"c" * 64)
    st, _, _, data = s.call("graph_staged_get", staging=[down["staging"]], size=64)
    assert (st, data) == (CUDA_SUCCESS, b"\0" * 64)

    st, _, out, _ = s.call("stream_create", flags=1, priority=0)
    assert st == CUDA_SUCCESS
    stream = out["stream"]
    g2 = graph(s)
    _, first = add(s, g2, EMPTY)

    def to_graph(**kw):
        req = dict(stream=stream, graph=g2, deps=[first], edges=[], mode=0)
        return s.call("stream_capture_to_graph", **dict(req, **kw))[0]

    assert to_graph(graph=0x7777) == CUDA_ERROR_INVALID_HANDLE
    assert to_graph(graph=first) == CUDA_ERROR_INVALID_HANDLE          # a node
    assert to_graph(deps=[e]) == CUDA_ERROR_INVALID_VALUE              # g's node
    assert to_graph(deps=[first, first]) == CUDA_ERROR_INVALID_VALUE
    assert to_graph(edges=[0, 0]) == CUDA_ERROR_INVALID_VALUE          # 2 edges, 1 dep
    assert to_graph(mode=7) == CUDA_ERROR_INVALID_VALUE
    assert to_graph(stream=0x7777) != CUDA_SUCCESS
    assert to_graph() == CUDA_SUCCESS
    st, _, info, _ = s.call("stream_capture_info", stream=stream)
    assert (st, info["status"], info["graph"], info["deps"]) == (CUDA_SUCCESS, 1, g2, [first])
    assert to_graph() != CUDA_SUCCESS                                  # already capturing
    st, res = driver(s, END_CAPTURE, stream, 1)
    assert (st, res[1]) == (CUDA_SUCCESS, g2)
