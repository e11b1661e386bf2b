"""QEMU arguments and libvirt XML fragments for a vGPU (DESIGN §7).

Two ways to give the guest virtio-vsock:
  kernel      /dev/vhost-vsock on the host: QEMU's vhost-vsock-pci, or
              libvirt's <vsock model='virtio'>;
  vhost-user  no /dev/vhost-vsock (the development machines): a
              vhost-device-vsock process per VM (supervised by pvgpu-vm)
              and QEMU's vhost-user-vsock-pci.  vhost-user needs the guest
              RAM in shared memory, hence the memfd backend; libvirt has no
              element for this device, hence <qemu:commandline>.
The window is always an ivshmem-plain device backed by the window file.

The CID is fixed, not <cid auto='yes'/>: pvgpud must know which CID is which
VM before the VM connects (DESIGN §5), and an automatic CID is only known
once the domain has started.  The registry hands out CIDs no other pvgpu VM
holds.

Only strings and xml.etree elements are built here; nothing is started.
"""

import json
import xml.etree.ElementTree as ET

from .spec import MIB, VSOCK_KERNEL, VSOCK_VHOST_USER, qemu_size

QEMU_NS = "http://libvirt.org/schemas/domain/qemu/1.0"
PVGPU_NS = "urn:pvgpu:vgpu:1"   # our <metadata> element

# Written as qemu: and pvgpu: rather than ElementTree's ns0:, ns1:.
ET.register_namespace("qemu", QEMU_NS)
ET.register_namespace("pvgpu", PVGPU_NS)

# QEMU ids of what we add; the libvirt variant finds its own arguments in
# <qemu:commandline> by them when detaching.
WINDOW_MEM_ID = "pvgpu-win"
WINDOW_DEV_ID = "pvgpu-ivshmem"
RAM_MEM_ID = "pvgpu-ram"
VSOCK_CHARDEV_ID = "pvgpu-vsock"
VSOCK_DEV_ID = "pvgpu-vsock-dev"


def qemu_window_args(spec):
    """ivshmem-plain whose BAR2 is the window file.  master=on: QEMU blocks
    the migration of a VM with an ivshmem device in peer mode, the
    default; as master, the window migrates as a RAM block."""
    return [
        "-object",
        f"memory-backend-file,id={WINDOW_MEM_ID},mem-path={spec.window_path},"
        f"size={qemu_size(spec.layout.size)},share=on",
        "-device", f"ivshmem-plain,memdev={WINDOW_MEM_ID},id={WINDOW_DEV_ID},master=on",
    ]


def vhost_user_device_args(spec):
    """The chardev and device of vhost-user-vsock; shared by the plain QEMU
    arguments and the libvirt <qemu:commandline>."""
    v = spec.vsock
    return [
        "-chardev", f"socket,id={VSOCK_CHARDEV_ID},path={v.socket}",
        "-device", f"vhost-user-vsock-pci,chardev={VSOCK_CHARDEV_ID},id={VSOCK_DEV_ID}",
    ]


def qemu_args(spec, ram, incoming=None):
    """Arguments to add to a QEMU command line (DESIGN §7).  `ram` is the
    guest RAM in bytes: with vhost-user it lives in a shared memfd backend
    whose size must equal -m, so -m is part of what we emit.  With
    `incoming` (a migration URI), the arguments of a migration's
    destination: the vsock device is left out, for `pvgpu-vm migrate` to
    plug in once the VM has arrived (migrate.py says why).  The vsock
    device comes last: leaving it out must not move the window to another
    PCI slot, since a migration finds the window's RAM by its slot."""
    args = []
    if spec.vsock.kind != VSOCK_KERNEL:
        size = qemu_size(ram)
        args += [
            "-m", size,
            "-object", f"memory-backend-memfd,id={RAM_MEM_ID},size={size},share=on",
            "-numa", f"node,memdev={RAM_MEM_ID}",
        ]
    args += qemu_window_args(spec)
    if incoming:
        args += ["-incoming", incoming]
    elif spec.vsock.kind == VSOCK_KERNEL:
        args += ["-device", f"vhost-vsock-pci,guest-cid={spec.vsock.cid},id={VSOCK_DEV_ID}"]
    else:
        args += vhost_user_device_args(spec)
    return args


# ---- libvirt XML fragments --------------------------------------------------

def vsock_element(spec):
    """<vsock model='virtio'><cid auto='no' address='N'/></vsock>"""
    vsock = ET.Element("vsock", model="virtio")
    ET.SubElement(vsock, "cid", auto="no", address=str(spec.vsock.cid))
    return vsock


def shmem_element(spec):
    """<shmem name='pvgpu-VM' role='master'><model type='ivshmem-plain'/>
    <size unit='M'>N</size></shmem>; role='master' (QEMU's master=on) lets
    the domain migrate, as qemu_window_args says."""
    shmem = ET.Element("shmem", name=spec.window_name, role="master")
    ET.SubElement(shmem, "model", type="ivshmem-plain")
    ET.SubElement(shmem, "size", unit="M").text = str(spec.layout.size // MIB)
    return shmem


def memory_backing_element():
    """Shared memfd guest RAM, which vhost-user needs."""
    mb = ET.Element("memoryBacking")
    ET.SubElement(mb, "source", type="memfd")
    ET.SubElement(mb, "access", mode="shared")
    return mb


def libvirt_vhost_user_args(spec, bus, slot):
    """vhost-user-vsock for <qemu:commandline>, at an explicit PCI address.

    libvirt gives each of its devices an explicit slot but does not know
    about this one, and QEMU 7.2 places a device without an address in the
    first slot free *when it is created*: key=value -device options are all
    created before libvirt's JSON ones, and libvirt emits <shmem> after
    <qemu:commandline>, so either way an unaddressed device takes a slot
    libvirt gave to something else and the domain does not start ("PCI: slot
    N function 0 not available").  domain.py picks a slot libvirt left free;
    the -device is JSON, as libvirt writes its own."""
    device = json.dumps({"driver": "vhost-user-vsock-pci", "chardev": VSOCK_CHARDEV_ID,
                         "id": VSOCK_DEV_ID, "bus": bus, "addr": f"{slot:#x}"},
                        separators=(",", ":"))
    return [
        "-chardev", f"socket,id={VSOCK_CHARDEV_ID},path={spec.vsock.socket}",
        "-device", device,
    ]


def qemu_commandline_element(spec, bus="pci.0", slot=0x1f):
    cl = ET.Element(f"{{{QEMU_NS}}}commandline")
    for arg in libvirt_vhost_user_args(spec, bus, slot):
        ET.SubElement(cl, f"{{{QEMU_NS}}}arg", value=arg)
    return cl


def metadata_element(spec):
    """Our record in the domain's <metadata>: what was attached, so that a
    repeated attach can tell it has nothing to do and detach knows what to
    take away."""
    attrs = {
        "gpu": str(spec.gpu),
        "window-size": str(spec.layout.size),
        "vsock": spec.vsock.kind,
        "cid": str(spec.vsock.cid),
    }
    if spec.memory:
        attrs["memory"] = str(spec.memory)
    return ET.Element(f"{{{PVGPU_NS}}}vgpu", attrs)


def fragments(spec):
    """The elements to add, as (where, element): 'devices', 'domain' (a
    direct child of <domain>) or 'metadata'."""
    out = [("devices", shmem_element(spec))]
    if spec.vsock.kind == VSOCK_KERNEL:
        out.insert(0, ("devices", vsock_element(spec)))
    elif spec.vsock.kind == VSOCK_VHOST_USER:
        out.append(("domain", memory_backing_element()))
        out.append(("domain", qemu_commandline_element(spec)))
    out.append(("metadata", metadata_element(spec)))
    return out
