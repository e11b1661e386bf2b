"""attach and detach on a defined libvirt domain, through the libvirt API.

The persistent definition is read with VIR_DOMAIN_XML_INACTIVE (the live
XML of a running domain is not what it boots with next time) and
VIR_DOMAIN_XML_SECURE (without it libvirt leaves out passwords, e.g. of
<graphics>, and defining the result would silently drop them).  The result
is defined with VIR_DOMAIN_DEFINE_VALIDATE, so libvirt checks it against its
schema before anything changes.

Adding or removing a vGPU changes devices and, for vhost-user, the memory
backing: a running domain would only see that after a restart, so both
refuse a running domain instead of leaving its definition and its reality
apart.  A repeated attach with the same settings changes nothing and
succeeds even while the domain runs.
"""

import xml.etree.ElementTree as ET

from . import domain, window
from .errors import Failure


def _libvirt():
    try:
        import libvirt
    except ImportError:
        raise Failure("the libvirt Python module is missing (apt-get install python3-libvirt)")
    # libvirt prints every error on stderr by default as well as raising it;
    # we report each failure once, in our own one line.
    libvirt.registerErrorHandler(lambda _ctx, _err: None, None)
    return libvirt


def open_domain(uri, name):
    """(libvirt module, connection, domain)."""
    libvirt = _libvirt()
    try:
        conn = libvirt.open(uri)
    except libvirt.libvirtError as e:
        raise Failure(f"cannot connect to libvirt at {uri or 'the default URI'}: "
                      f"{e.get_error_message()}")
    try:
        dom = conn.lookupByName(name)
    except libvirt.libvirtError as e:
        raise Failure(f"no libvirt domain {name!r}: {e.get_error_message()}")
    return libvirt, conn, dom


def persistent_xml(libvirt, dom):
    return dom.XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE | libvirt.VIR_DOMAIN_XML_SECURE)


def _parse_label(label):
    """'+64055:+107' (libvirt's DAC label) -> (64055, 107)."""
    try:
        user, group = label.strip().split(":")
        return int(user.lstrip("+")), int(group.lstrip("+"))
    except ValueError:
        return None


def qemu_owner(conn, root):
    """(uid, gid) that QEMU runs as for this domain: a static DAC
    <seclabel> of the domain, else the driver's base label from the
    capabilities (qemu.conf user/group).  None when libvirt does not say
    (e.g. a session daemon, where QEMU runs as the caller)."""
    for seclabel in root.findall("seclabel"):
        if seclabel.get("model") == "dac" and seclabel.findtext("label"):
            found = _parse_label(seclabel.findtext("label"))
            if found:
                return found
    caps = ET.fromstring(conn.getCapabilities())
    virt_type = root.get("type", "kvm")
    for secmodel in caps.findall("host/secmodel"):
        if secmodel.findtext("model") != "dac":
            continue
        for base in secmodel.findall("baselabel"):
            if base.get("type") == virt_type and base.text:
                found = _parse_label(base.text)
                if found:
                    return found
    return None


def _define(libvirt, conn, xml_text):
    try:
        conn.defineXMLFlags(xml_text, libvirt.VIR_DOMAIN_DEFINE_VALIDATE)
    except libvirt.libvirtError as e:
        raise Failure(f"libvirt refused the new definition: {e.get_error_message()}")


def attach(uri, name, registry, make_spec):
    """Attach a vGPU to the defined domain `name`.  `make_spec(others)`
    builds the VgpuSpec under the registry lock.  Returns (spec, changed)."""
    libvirt, conn, dom = open_domain(uri, name)
    root = domain.parse(persistent_xml(libvirt, dom))
    with registry.locked():
        spec = make_spec(registry.load_all())
        owner = qemu_owner(conn, root)
        if owner:
            spec.qemu_uid, spec.qemu_gid = owner
        if domain.attached_as(root, spec):
            window.ensure_window(spec.window_path, spec.layout, spec.qemu_uid, spec.qemu_gid)
            registry.save(spec)
            return spec, False
        if dom.isActive():
            raise Failure(f"domain {name} is running: attaching a vGPU adds devices"
                          + (" and shares its RAM" if spec.vsock.kind == "vhost-user" else "")
                          + ", which needs a restart; shut it down and attach again")
        new_xml = domain.to_text(domain.apply(root, spec))
        created = window.ensure_window(spec.window_path, spec.layout,
                                       spec.qemu_uid, spec.qemu_gid)
        try:
            _define(libvirt, conn, new_xml)
        except Failure:
            if created:
                window.remove_window(spec.window_path)
            raise
        registry.save(spec)
    return spec, True


def detach(uri, name, registry, cleanup):
    """Take the vGPU out of the defined domain `name`; `cleanup(spec)`
    removes the window, the registry entry and the supervisor once the
    domain no longer refers to them.  Returns True if the XML changed."""
    libvirt, conn, dom = open_domain(uri, name)
    root = domain.parse(persistent_xml(libvirt, dom))
    with registry.locked():
        changed = domain.strip(root)
        active = dom.isActive()
        if changed and active:
            raise Failure(f"domain {name} is running: removing its vGPU needs a restart; "
                          "shut it down and detach again")
        if changed:
            _define(libvirt, conn, domain.to_text(root))
        if not active:
            cleanup(name)
    return changed

