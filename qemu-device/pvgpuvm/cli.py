"""pvgpu-vm: give a VM a vGPU (a window and a vsock wired to pvgpud).

    pvgpu-vm attach DOMAIN [--memory 8G] [--gpu 0] [--window-size 256M]
    pvgpu-vm detach DOMAIN
    pvgpu-vm xml NAME [--domain-xml FILE [--remove]]
    pvgpu-vm qemu-args NAME [--ram 1G] [--dry-run] [--incoming URI]
    pvgpu-vm migrate NAME --from QMP --to QMP --uri URI
    pvgpu-vm supervise NAME
    pvgpu-vm prepare NAME
    pvgpu-vm release NAME
    pvgpu-vm xen attach DOMAIN [--memory 8G] [--gpu 0] [--guest-conf FILE]
    pvgpu-vm xen detach DOMAIN

`pvgpuctl attach` executes this program, so this command line is an
interface: add to it, do not change it.  Exit status 0 on success, 1 when
something failed, 2 for bad usage, with one line on stderr (DESIGN §8).
"""

import argparse
import json
import os
import shlex
import sys

from . import domain, generate, registry as registry_mod, supervise, window
from .errors import Failure, UsageError
from .spec import (DEFAULT_PORT, DEFAULT_RUN_DIR, SHM_DIR,
                   VSOCK_KERNEL, VSOCK_VHOST_USER, VgpuSpec, VsockSpec,
                   check_vm_name, check_window_size, default_layout,
                   default_vsock_kind, parse_size, vhost_user_paths, window_name)

PROG = "pvgpu-vm"

# `pvgpu-vm xen` is the Xen channel's xl glue: xen-vchan/pvgpu_xen.py, in the
# source tree beside qemu-device/, installed beside pvgpuvm/ by pvgpu-xen.
_TREE_XEN = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.realpath(__file__)))), "xen-vchan")
if os.path.isfile(os.path.join(_TREE_XEN, "pvgpu_xen.py")) and _TREE_XEN not in sys.path:
    sys.path.append(_TREE_XEN)
try:
    import pvgpu_xen as xen
except ModuleNotFoundError as e:
    if e.name != "pvgpu_xen":
        raise
    xen = None

MAX_UNIX_PATH = 107   # sizeof(sun_path) - 1


class Parser(argparse.ArgumentParser):
    """argparse, but bad usage is one line on stderr and exit status 2."""

    def error(self, message):
        raise UsageError(f"{message} (see {self.prog} --help)")


def _add_vgpu_options(p):
    p.add_argument("--gpu", type=int, default=0, help="host GPU index (default 0)")
    p.add_argument("--memory", metavar="SIZE",
                   help="GPU memory quota of this VM's vGPU, e.g. 8G (default: no quota)")
    p.add_argument("--window-size", metavar="SIZE", default="256M",
                   help="shared window: a power of two, at least 1M (default 256M)")
    p.add_argument("--vsock", choices=("auto", VSOCK_KERNEL, VSOCK_VHOST_USER), default="auto",
                   help="kernel vhost-vsock or vhost-user through vhost-device-vsock "
                        "(default: kernel where /dev/vhost-vsock exists)")
    p.add_argument("--cid", type=int, help="guest vsock CID (default: the VM's registered "
                   "one, or the lowest free from 3)")
    p.add_argument("--port", type=int, default=DEFAULT_PORT,
                   help=f"pvgpud's vsock port (default {DEFAULT_PORT})")


def build_parser():
    p = Parser(prog=PROG, description="Attach pvgpu vGPUs to VMs (libvirt or plain QEMU).")
    p.add_argument("--run-dir", default=os.environ.get("PVGPU_RUN_DIR", DEFAULT_RUN_DIR),
                   help="registry (RUN_DIR/vms) and vhost-user sockets (RUN_DIR/vsock); "
                        "default $PVGPU_RUN_DIR or /run/pvgpu")
    sub = p.add_subparsers(dest="command", required=True, parser_class=Parser)

    a = sub.add_parser("attach", help="add a vGPU to a defined libvirt domain")
    a.add_argument("domain")
    a.add_argument("--connect", "-c", metavar="URI", help="libvirt URI (default: libvirt's)")
    _add_vgpu_options(a)

    d = sub.add_parser("detach", help="remove the vGPU from a defined libvirt domain")
    d.add_argument("domain")
    d.add_argument("--connect", "-c", metavar="URI", help="libvirt URI (default: libvirt's)")

    x = sub.add_parser("xml", help="print libvirt XML, without libvirt")
    x.add_argument("name")
    x.add_argument("--domain-xml", metavar="FILE",
                   help="a whole domain XML ('-' for stdin): print it with the vGPU added")
    x.add_argument("--remove", action="store_true",
                   help="with --domain-xml: print it with the vGPU removed instead")
    _add_vgpu_options(x)

    q = sub.add_parser("qemu-args", help="print QEMU arguments; create the window and register")
    q.add_argument("name")
    q.add_argument("--ram", metavar="SIZE", default="1G",
                   help="guest RAM (vhost-user puts it in a shared memfd of this size and "
                        "emits -m; default 1G)")
    q.add_argument("--dry-run", action="store_true",
                   help="only print: create no window, write no registry entry")
    q.add_argument("--format", choices=("shell", "lines", "json"), default="shell",
                   help="one shell-quoted line, one argument per line, or a JSON list")
    q.add_argument("--incoming", metavar="URI",
                   help="the arguments of a live migration's destination, waiting at URI "
                        "(e.g. unix:/run/pvgpu/NAME.migrate): the vsock device is left out "
                        "for pvgpu-vm migrate to plug in")
    _add_vgpu_options(q)

    m = sub.add_parser("migrate", help="live-migrate a VM with a vGPU between two QEMUs "
                       "of this host")
    m.add_argument("name")
    m.add_argument("--from", dest="src", metavar="QMP", required=True,
                   help="the source QEMU's QMP Unix socket")
    m.add_argument("--to", dest="dst", metavar="QMP", required=True,
                   help="the destination QEMU's QMP Unix socket (started with the "
                        "arguments of qemu-args --incoming URI)")
    m.add_argument("--uri", required=True, help="the destination's -incoming URI")
    m.add_argument("--timeout", type=float, default=300.0, metavar="SECONDS",
                   help="give up (and keep the VM on the source) after this long "
                        "(default 300)")
    m.add_argument("--quit-source", action="store_true",
                   help="stop the source QEMU once the VM runs on the destination")

    s = sub.add_parser("supervise", help="run vhost-device-vsock for a VM, restarting it")
    s.add_argument("name")
    s.add_argument("--vhost-device-vsock", metavar="PATH", help="the binary (default: search)")

    r = sub.add_parser("prepare", help="re-create a registered VM's window (e.g. after reboot)")
    r.add_argument("name")

    rel = sub.add_parser("release", help="forget a VM started without libvirt: stop its "
                         "supervisor, remove its window and registry entry")
    rel.add_argument("name")

    if xen:
        xen.add_parser(sub, Parser)
    else:
        x = sub.add_parser("xen", help="give a Xen domain a vGPU (needs pvgpu-xen)")
        x.add_argument("rest", nargs=argparse.REMAINDER)
    return p


def make_spec(args, vm, others):
    """The VgpuSpec for `vm` from the command line, keeping the window id and
    CID it already has in the registry (`others`: every registered VM)."""
    check_vm_name(vm)
    size = check_window_size(parse_size(args.window_size, "window size"))
    memory = parse_size(args.memory, "memory") if args.memory else None
    if args.gpu < 0:
        raise UsageError(f"bad GPU index {args.gpu}")
    kind = default_vsock_kind() if args.vsock == "auto" else args.vsock
    reg = registry_mod.Registry(os.path.join(args.run_dir, "vms"))
    existing = others.get(vm)

    if args.cid is not None:
        if not 3 <= args.cid <= registry_mod.MAX_CID:
            raise UsageError(f"bad CID {args.cid}: guest CIDs start at 3")
        holder = [n for n, s in others.items() if n != vm and s.vsock.cid == args.cid]
        if holder:
            raise Failure(f"CID {args.cid} already belongs to VM {holder[0]}")
        cid = args.cid
    elif existing:
        cid = existing.vsock.cid
    else:
        cid = reg.allocate_cid(vm, others)

    wid = existing.layout.window_id if existing else reg.allocate_window_id(vm, others)
    vsock = VsockSpec(kind=kind, cid=cid, port=args.port)
    if kind == VSOCK_VHOST_USER:
        vsock.socket, vsock.uds_path = vhost_user_paths(args.run_dir, vm)
        longest = f"{vsock.uds_path}_{vsock.port}"
        if len(os.fsencode(longest)) > MAX_UNIX_PATH:
            raise UsageError(f"Unix socket path {longest} is longer than the {MAX_UNIX_PATH} "
                             "bytes a socket address holds: use a shorter --run-dir or VM name")
    return VgpuSpec(vm=vm, window_path=os.path.join(SHM_DIR, window_name(vm)),
                    layout=default_layout(size, wid), vsock=vsock, gpu=args.gpu,
                    memory=memory)


def _registry(args):
    return registry_mod.Registry(os.path.join(args.run_dir, "vms"))


def _read_only_spec(args, vm):
    """For commands that only print: what attach would use, changing nothing."""
    return make_spec(args, vm, _registry(args).load_all())


def _cleanup(args, vm):
    """Undo what attach/qemu-args left outside the domain: the supervisor,
    the window file and the registry entry."""
    reg = _registry(args)
    spec = reg.load(vm)
    if spec and spec.vsock.kind == VSOCK_VHOST_USER:
        supervise.stop(spec)
    path = spec.window_path if spec else os.path.join(SHM_DIR, window_name(vm))
    window.remove_window(path)
    reg.remove(vm)


def _summary(spec):
    v = spec.vsock
    text = (f"window {spec.window_path} ({spec.layout.size >> 20} MiB, id {spec.layout.window_id:#x}), "
            f"GPU {spec.gpu}, vsock {v.kind} CID {v.cid}")
    if v.kind == VSOCK_VHOST_USER:
        text += f"; pvgpud listens on {v.uds_path}_{v.port}"
    return text


def cmd_attach(args):
    from . import libvirt_ops
    vm = check_vm_name(args.domain)
    spec, changed = libvirt_ops.attach(args.connect, vm, _registry(args),
                                       lambda others: make_spec(args, vm, others))
    print(f"{'attached' if changed else 'already attached'}: {vm}: {_summary(spec)}")
    if spec.vsock.kind == VSOCK_VHOST_USER:
        print(f"before starting {vm}, run: {PROG} supervise {vm}")
    return 0


def cmd_detach(args):
    from . import libvirt_ops
    vm = check_vm_name(args.domain)
    changed = libvirt_ops.detach(args.connect, vm, _registry(args),
                                 lambda name: _cleanup(args, name))
    print(f"{'detached' if changed else 'no vGPU attached'}: {vm}")
    return 0


def cmd_xml(args):
    vm = check_vm_name(args.name)
    if args.remove and not args.domain_xml:
        raise UsageError("--remove needs --domain-xml")
    if args.domain_xml:
        if args.domain_xml == "-":
            text = sys.stdin.read()
        else:
            try:
                with open(args.domain_xml, encoding="utf-8") as f:
                    text = f.read()
            except OSError as e:
                raise Failure(f"cannot read {args.domain_xml}: {e.strerror}")
        root = domain.parse(text)
        if domain.domain_name(root) != vm:
            raise UsageError(f"the domain XML is for {domain.domain_name(root)!r}, not {vm!r}")
        if args.remove:
            domain.strip(root)
        else:
            domain.apply(root, _read_only_spec(args, vm))
        sys.stdout.write(domain.to_text(root))
        return 0
    spec = _read_only_spec(args, vm)
    places = {"devices": "inside <devices>", "domain": "inside <domain>",
              "metadata": "inside <metadata>"}
    for where, element in generate.fragments(spec):
        domain.ET.indent(element, space="  ")
        note = places[where]
        if element.tag.endswith("}commandline"):
            note += "; bus/addr: a root-bus slot no device of the domain uses (pcie.0 on q35)"
        print(f"<!-- {note} -->")
        print(domain.ET.tostring(element, encoding="unicode"))
    return 0


def cmd_qemu_args(args):
    vm = check_vm_name(args.name)
    ram = parse_size(args.ram, "RAM size")
    reg = _registry(args)
    if args.dry_run:
        spec = _read_only_spec(args, vm)
    else:
        with reg.locked():
            spec = make_spec(args, vm, reg.load_all())
            spec.qemu_uid, spec.qemu_gid = os.geteuid(), os.getegid()
            window.ensure_window(spec.window_path, spec.layout)
            reg.save(spec)
    argv = generate.qemu_args(spec, ram, incoming=args.incoming)
    if args.format == "lines":
        print("\n".join(argv))
    elif args.format == "json":
        print(json.dumps(argv))
    else:
        print(shlex.join(argv))
    return 0


def _registered(args, vm):
    spec = _registry(args).load(check_vm_name(vm))
    if spec is None:
        raise Failure(f"VM {vm} is not registered (attach it, or run qemu-args, first)")
    return spec


def cmd_supervise(args):
    spec = _registered(args, args.name)
    binary = supervise.find_binary(args.vhost_device_vsock)
    return supervise.Supervisor(spec, binary).run()


def cmd_migrate(args):
    from . import migrate
    spec = _registered(args, args.name)
    if args.timeout <= 0:
        raise UsageError("--timeout must be positive")
    migrate.migrate(spec, args.src, args.dst, args.uri, timeout=args.timeout,
                    quit_source=args.quit_source)
    return 0


def cmd_prepare(args):
    spec = _registered(args, args.name)
    created = window.ensure_window(spec.window_path, spec.layout, spec.qemu_uid, spec.qemu_gid)
    print(f"{'created' if created else 'checked'} {spec.window_path}")
    return 0


def cmd_release(args):
    vm = check_vm_name(args.name)
    _cleanup(args, vm)
    print(f"released: {vm}")
    return 0


COMMANDS = {
    "attach": cmd_attach, "detach": cmd_detach, "xml": cmd_xml,
    "qemu-args": cmd_qemu_args, "migrate": cmd_migrate, "supervise": cmd_supervise,
    "prepare": cmd_prepare, "release": cmd_release,
    "xen": xen.run if xen else None,
}


def main(argv=None):
    try:
        args = build_parser().parse_args(argv)
        if not COMMANDS[args.command]:
            raise Failure("pvgpu-vm xen: the Xen glue is not installed (apt install pvgpu-xen)")
        return COMMANDS[args.command](args)
    except UsageError as e:
        print(f"{PROG}: {e}", file=sys.stderr)
        return 2
    except Failure as e:
        print(f"{PROG}: {e}", file=sys.stderr)
        return 1
    except PermissionError as e:
        print(f"{PROG}: {e.filename or ''}: permission denied (run as root?)", file=sys.stderr)
        return 1
    except OSError as e:
        where = f"{e.filename}: " if e.filename else ""
        print(f"{PROG}: {where}{e.strerror or e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 1
