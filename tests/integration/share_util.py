"""What share_vmm.py and share_pool.py have in common: the ctypes helpers
and handing a descriptor (SCM_RIGHTS) to a child of each VM."""
import ctypes
import os
import socket
import subprocess
import sys


def check(r, what):
    if r != 0:
        print("FAIL", what, r, flush=True)
        sys.exit(1)


def word(cu, p, off):
    """The 32-bit word at device address p + off, in hex."""
    buf = (ctypes.c_uint * 1)()
    check(cu.cuMemcpyDtoH_v2(buf, ctypes.c_uint64(p.value + off), ctypes.c_size_t(4)), "dtoh")
    return hex(buf[0])


def to_children(script, argv, payload, fd):
    """Run `script LIBCUDA child SOCK` once as a process of Alice's VM
    (argv[3]) and once of Bob's (argv[4], token argv[5]), handing each
    payload and fd over the socket; their outputs."""
    outs = []
    for uri, token in ((argv[3], ""), (argv[4], argv[5])):
        mine, theirs = socket.socketpair()
        env = dict(os.environ, PVGPU_DEVICES=uri)
        env.pop("PVGPU_TOKEN", None)
        if token:
            env["PVGPU_TOKEN"] = token
        child = subprocess.Popen([sys.executable, script, argv[1], "child", str(theirs.fileno())],
                                 pass_fds=[theirs.fileno()], env=env, stdout=subprocess.PIPE,
                                 text=True)
        theirs.close()
        socket.send_fds(mine, [payload], [fd])
        out, _ = child.communicate(timeout=60)
        outs.append(out.strip())
    return outs


def from_parent(sock_fd, size):
    """What to_children handed this process: (payload, fd)."""
    sock = socket.socket(fileno=sock_fd)
    msg, fds, _, _ = socket.recv_fds(sock, size, 1)
    return msg, fds[0]
