"""pvgpu-vm xen: give a Xen domain a vGPU (the xl glue of the Xen channel).

It lives here, with both halves of vchan:// (DESIGN §1), and is loaded by
qemu-device's pvgpu-vm as the module `pvgpu_xen`: from this folder in the
source tree, or from /usr/lib/pvgpu/ (beside pvgpuvm/) where the pvgpu-xen
package installs it.

A Xen domU needs no device in its xl config: pvgpud (in the driver domain,
listening on vchan://NAME) offers a channel through xenstore to every
domain its policy names, by the domain's xl `name=` (dom0's xenstore
/local/domain/DOMID/name; domids change when a domain restarts).  So
attaching is two files:

  * the driver domain's policy (pvgpud --config, default
    /etc/pvgpu/pvgpud.conf): a `[vm NAME]` section with the quota, GPUs,
    mode and weight, replacing one the file already has;
  * the domU's /etc/pvgpu/guest.conf: `vchan://BACKEND/CHANNEL` (printed,
    or written where --guest-conf says, e.g. into the domU's image).

pvgpud rereads its policy on SIGHUP (`systemctl reload pvgpud`); attach
before `xl create` and the channel is offered as the domain appears.
"""

import os
import re

from pvgpuvm.errors import Failure, UsageError
from pvgpuvm.spec import check_vm_name, parse_size

DEFAULT_CONFIG = "/etc/pvgpu/pvgpud.conf"
DEFAULT_CHANNEL = "pvgpu"
SECTION = re.compile(r"^\s*\[([^\]]*)\]\s*(?:[;#].*)?$")
CHANNEL = re.compile(r"^[A-Za-z0-9_.-]{1,63}$")


def add_parser(sub, parser_class):
    x = sub.add_parser("xen", help="give a Xen domain a vGPU (pvgpud's policy, the "
                       "domU's guest.conf)")
    xs = x.add_subparsers(dest="xen_command", required=True, parser_class=parser_class)
    a = xs.add_parser("attach", help="name the domain in pvgpud's policy and print "
                      "(or write) its guest.conf")
    a.add_argument("domain", help="the domain's xl name (name = ... in its config)")
    a.add_argument("--memory", metavar="SIZE", help="GPU memory quota, e.g. 8G (default: none)")
    a.add_argument("--gpu", type=int, action="append", metavar="N",
                   help="host GPU index it may use (repeatable; default: all)")
    a.add_argument("--mode", choices=("shared", "exclusive"), default="shared")
    a.add_argument("--weight", type=int, help="share of GPU time under contention")
    a.add_argument("--config", default=DEFAULT_CONFIG,
                   help=f"pvgpud's policy file (default {DEFAULT_CONFIG})")
    a.add_argument("--backend", type=int, default=0, metavar="DOMID",
                   help="domid of the driver domain running pvgpud (default 0)")
    a.add_argument("--channel", default=DEFAULT_CHANNEL,
                   help=f"pvgpud's vchan://NAME (default {DEFAULT_CHANNEL})")
    a.add_argument("--guest-conf", metavar="FILE",
                   help="write the domU's guest.conf here instead of printing it")
    d = xs.add_parser("detach", help="remove the domain from pvgpud's policy")
    d.add_argument("domain")
    d.add_argument("--config", default=DEFAULT_CONFIG)


def _section_bounds(lines, vm):
    """(start, end) of the `[vm NAME]` section in lines, or None."""
    start = None
    for i, line in enumerate(lines):
        m = SECTION.match(line)
        if not m:
            continue
        if start is not None:
            return start, i
        if m.group(1).split() == ["vm", vm]:
            start = i
    return (start, len(lines)) if start is not None else None


def _read(path):
    try:
        with open(path, encoding="utf-8") as f:
            return f.read().splitlines()
    except FileNotFoundError:
        return []
    except OSError as e:
        raise Failure(f"cannot read {path}: {e.strerror}")


def _write(path, lines):
    tmp = f"{path}.pvgpu-vm.tmp"
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(tmp, "w", encoding="utf-8") as f:
        f.write("\n".join(lines).rstrip("\n") + "\n")
    try:
        os.chmod(tmp, os.stat(path).st_mode & 0o7777)
    except FileNotFoundError:
        os.chmod(tmp, 0o644)
    os.replace(tmp, path)


def section(args, vm):
    """The policy section for vm from the command line."""
    out = [f"[vm {vm}]", "; written by pvgpu-vm xen attach: the xl domain of this name"]
    if args.memory:
        parse_size(args.memory, "memory")   # refuses a bad size here, not in pvgpud
        out.append(f"memory = {args.memory}")
    for g in args.gpu or ():
        if g < 0:
            raise UsageError(f"bad GPU index {g}")
    if args.gpu:
        out.append("gpus = " + ",".join(str(g) for g in args.gpu))
    out.append(f"mode = {args.mode}")
    if args.weight is not None:
        if args.weight < 1:
            raise UsageError(f"bad weight {args.weight}: at least 1")
        out.append(f"weight = {args.weight}")
    return out


def guest_conf(args):
    return ("# pvgpu in a Xen domU (pvgpu-vm xen attach): the driver domain's\n"
            "# pvgpud over a vchan ring and a granted window.\n"
            f"vchan://{args.backend}/{args.channel}\n")


def cmd_attach(args):
    vm = check_vm_name(args.domain)
    if not CHANNEL.match(args.channel):
        raise UsageError(f"bad channel name {args.channel!r}")
    if args.backend < 0 or args.backend >= 0x7ff0:
        raise UsageError(f"bad backend domid {args.backend}")
    lines = _read(args.config)
    new = section(args, vm)
    where = _section_bounds(lines, vm)
    if where:
        start, end = where
        lines[start:end] = new + [""]
    else:
        if lines and lines[-1].strip():
            lines.append("")
        lines += new
    _write(args.config, lines)
    conf = guest_conf(args)
    if args.guest_conf:
        _write(args.guest_conf, conf.splitlines())
    print(f"{'updated' if where else 'attached'}: {vm}: policy in {args.config} "
          "(reload pvgpud: systemctl reload pvgpud, or kill -HUP its pid)")
    if args.guest_conf:
        print(f"guest.conf for {vm} written to {args.guest_conf}")
    else:
        print(f"in {vm}, /etc/pvgpu/guest.conf:\n{conf}", end="")
    print(f"in {vm}: modprobe xen-evtchn xen-gntdev xen-gntalloc (the guest package's "
          "libraries open /dev/xen/*)")
    return 0


def cmd_detach(args):
    vm = check_vm_name(args.domain)
    lines = _read(args.config)
    where = _section_bounds(lines, vm)
    if where:
        del lines[where[0]:where[1]]
        _write(args.config, lines)
    print(f"{'detached' if where else 'not attached'}: {vm}")
    return 0


def run(args):
    return {"attach": cmd_attach, "detach": cmd_detach}[args.xen_command](args)
