"""Adding a vGPU to, and taking it out of, a libvirt domain's XML.

Pure text-to-text transforms with xml.etree, so `pvgpu-vm xml` and the tests
use exactly what `attach`/`detach` send to libvirt.  Everything in the
domain that pvgpu did not add is kept as it was; what pvgpu adds is
recorded in a <metadata> element of its own namespace (including the
domain's <memoryBacking> as it was before, when vhost-user had to change
it), so detach restores the domain without guessing.
"""

import copy
import io
import json
import xml.etree.ElementTree as ET

from . import generate
from .errors import Failure
from .spec import MIB, VSOCK_KERNEL, VSOCK_VHOST_USER, window_name

QEMU_NS = generate.QEMU_NS
PVGPU_NS = generate.PVGPU_NS
_VGPU = f"{{{PVGPU_NS}}}vgpu"
_SAVED = f"{{{PVGPU_NS}}}saved"
_QEMU_CMDLINE = f"{{{QEMU_NS}}}commandline"
_QEMU_ARG = f"{{{QEMU_NS}}}arg"


def parse(xml_text):
    """Parse a domain, keeping the namespace prefixes it uses (qemu:, and
    whatever other programs put in <metadata>) for when it is written back."""
    for _event, (prefix, uri) in ET.iterparse(io.StringIO(xml_text), events=("start-ns",)):
        if prefix:
            try:
                ET.register_namespace(prefix, uri)
            except ValueError:
                pass   # prefixes like ns0 are ElementTree's own; it renames them
    ET.register_namespace("qemu", QEMU_NS)
    ET.register_namespace("pvgpu", PVGPU_NS)
    try:
        root = ET.fromstring(xml_text)
    except ET.ParseError as e:
        raise Failure(f"domain XML does not parse: {e}")
    if root.tag != "domain":
        raise Failure(f"expected a <domain> document, got <{root.tag}>")
    return root


def to_text(root):
    root = copy.deepcopy(root)
    ET.indent(root, space="  ")
    return ET.tostring(root, encoding="unicode") + "\n"


def domain_name(root):
    name = root.findtext("name")
    if not name:
        raise Failure("domain XML has no <name>")
    return name.strip()


def _qemu_cmdline_ours(cl):
    """Indexes of the <qemu:arg> elements of ours: each option value that
    names one of our ids, and the flag (-chardev, -device) before it."""
    args = list(cl.findall(_QEMU_ARG))
    ours = set()
    for i, arg in enumerate(args):
        value = arg.get("value", "")
        if (f"id={generate.VSOCK_CHARDEV_ID}," in value + ","
                or f'"chardev":"{generate.VSOCK_CHARDEV_ID}"' in value
                or f"chardev={generate.VSOCK_CHARDEV_ID}," in value + ","):
            ours.add(i)
            if i > 0 and args[i - 1].get("value", "").startswith("-"):
                ours.add(i - 1)
    return [args[i] for i in sorted(ours)]


def strip(root):
    """Remove everything pvgpu added to the domain (in place).  Returns True
    if anything was removed."""
    changed = False
    vm = domain_name(root)
    metadata = root.find("metadata")
    record = metadata.find(_VGPU) if metadata is not None else None

    devices = root.find("devices")
    if devices is not None:
        for shmem in devices.findall("shmem"):
            if shmem.get("name") == window_name(vm):
                devices.remove(shmem)
                changed = True
        # A <vsock> is ours only if our record says we added it.
        if record is not None and record.get("vsock") == VSOCK_KERNEL:
            for vsock in devices.findall("vsock"):
                devices.remove(vsock)
                changed = True

    for cl in root.findall(_QEMU_CMDLINE):
        for arg in _qemu_cmdline_ours(cl):
            cl.remove(arg)
            changed = True
        if len(cl) == 0:
            root.remove(cl)

    if record is not None and record.get("vsock") == VSOCK_VHOST_USER:
        current = root.find("memoryBacking")
        saved = record.find(_SAVED)
        original = saved.find("memoryBacking") if saved is not None else None
        if current is not None:
            index = list(root).index(current)
            root.remove(current)
            if original is not None:
                root.insert(index, copy.deepcopy(original))
        elif original is not None:
            root.append(copy.deepcopy(original))

    if record is not None:
        metadata.remove(record)
        changed = True
        if len(metadata) == 0:
            root.remove(metadata)
    return changed


def _insert_after(root, element, names):
    """Put `element` after the last of the children named in `names` (so
    <metadata> sits near <name>/<uuid>, as libvirt writes it)."""
    index = 0
    for i, child in enumerate(root):
        if child.tag in names:
            index = i + 1
    root.insert(index, element)


def _make_ram_shared(root, record):
    """Give the domain shared memfd RAM for vhost-user, saving the old
    <memoryBacking> in our record.  A file or memfd source is kept (both can
    be shared); no source, or an anonymous one, becomes memfd."""
    mb = root.find("memoryBacking")
    saved = ET.SubElement(record, _SAVED)
    if mb is None:
        _insert_after(root, generate.memory_backing_element(),
                      ("name", "uuid", "title", "description", "metadata",
                       "maxMemory", "memory", "currentMemory"))
        return
    saved.append(copy.deepcopy(mb))
    source = mb.find("source")
    if source is None:
        source = ET.SubElement(mb, "source")
    if source.get("type") in (None, "anonymous"):
        source.set("type", "memfd")
    access = mb.find("access")
    if access is None:
        access = ET.SubElement(mb, "access")
    access.set("mode", "shared")


def _check_numa_cells(root):
    """vhost-user needs every byte of guest RAM shared; a NUMA cell that asks
    for private memory would override <memoryBacking>."""
    for cell in root.findall("cpu/numa/cell"):
        if cell.get("memAccess") == "private":
            raise Failure("domain has a NUMA cell with memAccess='private'; vhost-user-vsock "
                          "needs shared guest memory: change it or use kernel vsock")


def apply(root, spec):
    """Attach the vGPU described by `spec` (in place), replacing any earlier
    pvgpu attachment."""
    strip(root)
    devices = root.find("devices")
    if devices is None:
        devices = ET.SubElement(root, "devices")
    if devices.find("vsock") is not None:
        raise Failure("domain already has a <vsock> device that pvgpu did not add; "
                      "pvgpu needs its own (with a CID it knows): remove that one first")

    metadata = root.find("metadata")
    if metadata is None:
        metadata = ET.Element("metadata")
        _insert_after(root, metadata, ("name", "uuid", "genid", "title", "description"))
    record = generate.metadata_element(spec)
    metadata.append(record)

    if spec.vsock.kind == VSOCK_VHOST_USER:
        _check_numa_cells(root)
        _make_ram_shared(root, record)
        cl = root.find(_QEMU_CMDLINE)
        if cl is None:
            cl = ET.SubElement(root, _QEMU_CMDLINE)
        bus, slot = free_root_slot(root)
        cl.extend(list(generate.qemu_commandline_element(spec, bus, slot)))
    else:
        devices.append(generate.vsock_element(spec))
    devices.append(generate.shmem_element(spec))
    return root


def attached_as(root, spec):
    """True if the domain already carries exactly this vGPU (as libvirt
    writes it back: it adds addresses, and may reorder), so that a repeated
    attach changes nothing, even on a running domain."""
    metadata = root.find("metadata")
    record = metadata.find(_VGPU) if metadata is not None else None
    want = generate.metadata_element(spec)
    if record is None or dict(record.attrib) != dict(want.attrib):
        return False
    devices = root.find("devices")
    if devices is None:
        return False
    shmems = [s for s in devices.findall("shmem") if s.get("name") == spec.window_name]
    if len(shmems) != 1 or shmems[0].find("model") is None \
            or shmems[0].find("model").get("type") != "ivshmem-plain" \
            or _shmem_bytes(shmems[0]) != spec.layout.size:
        return False
    if spec.vsock.kind == VSOCK_KERNEL:
        cids = [v.find("cid") for v in devices.findall("vsock")]
        return (len(cids) == 1 and cids[0] is not None and cids[0].get("auto") == "no"
                and cids[0].get("address") == str(spec.vsock.cid))
    mb = root.find("memoryBacking")
    if mb is None or mb.find("access") is None or mb.find("access").get("mode") != "shared":
        return False
    if mb.find("source") is None or mb.find("source").get("type") not in ("memfd", "file"):
        return False
    have = []
    for cl in root.findall(_QEMU_CMDLINE):
        have += [a.get("value") for a in _qemu_cmdline_ours(cl)]
    want = generate.libvirt_vhost_user_args(spec, "", 0)
    if len(have) != 4 or have[:3] != want[:3]:
        return False
    try:
        device = json.loads(have[3])
    except ValueError:
        return False
    return all(device.get(k) == v for k, v in json.loads(want[3]).items()
               if k not in ("bus", "addr"))


def _is_q35(root):
    machine = root.find("os/type")
    return (any(c.get("model") == "pcie-root" for c in root.findall("devices/controller"))
            or (machine is not None and "q35" in (machine.get("machine") or "")))


def free_root_slot(root):
    """(bus, slot) on the root PCI bus for our <qemu:commandline> device:
    the highest slot that no device in the XML has an address on.  libvirt
    gives devices without an address the lowest free slots (on q35 it puts
    them behind root ports), so the highest one stays ours unless the bus
    is nearly full.  Slot 0x1f on q35 is the ICH9's."""
    used = set()
    for address in root.iter("address"):
        if address.get("type") != "pci":
            continue
        if int(address.get("domain", "0"), 0) == 0 and int(address.get("bus", "0"), 0) == 0:
            used.add(int(address.get("slot", "0"), 0))
    q35 = _is_q35(root)
    top = 0x1e if q35 else 0x1f
    for slot in range(top, 2, -1):
        if slot not in used:
            return ("pcie.0" if q35 else "pci.0"), slot
    raise Failure("no free slot left on the domain's root PCI bus for vhost-user-vsock")


_SIZE_UNITS = {"b": 1, "bytes": 1, "k": 1 << 10, "kib": 1 << 10, "m": MIB, "mib": MIB,
               "g": 1 << 30, "gib": 1 << 30, "kb": 1000, "mb": 1000 ** 2, "gb": 1000 ** 3}


def _shmem_bytes(shmem):
    size = shmem.find("size")
    if size is None or not (size.text or "").strip().isdigit():
        return None
    unit = (size.get("unit") or "b").lower()
    return int(size.text.strip()) * _SIZE_UNITS.get(unit, 0)


def attach_text(xml_text, spec):
    return to_text(apply(parse(xml_text), spec))


def detach_text(xml_text):
    root = parse(xml_text)
    strip(root)
    return to_text(root)
