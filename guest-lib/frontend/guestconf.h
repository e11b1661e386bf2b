/*
 * guestconf.h - the guest's configuration file, /etc/pvgpu/guest.conf.
 *
 * Where PVGPU_DEVICES is unset or empty, the guest library takes its list
 * of backends from this file (the pvgpu-guest package installs it; the
 * Ansible role pvgpu_guest writes it).  Format: one entry per line, each
 * exactly what PVGPU_DEVICES would hold between two commas (a URI,
 * optionally followed by #N for one GPU of that backend):
 *
 *     # pvgpud on the host, over virtio-vsock
 *     vsock://2:7000
 *     unix:///run/pvgpu/pvgpu.sock#0
 *
 * Blank lines are ignored; a line whose first non-blank character is '#'
 * is a comment, and so is the rest of a line from a '#' that follows a
 * blank (the #N of an entry follows the URI directly).  PVGPU_GUEST_CONF
 * names another file (tests).
 */
#ifndef PVGPU_GUESTCONF_H
#define PVGPU_GUESTCONF_H

#define PVGPU_GUEST_CONF_PATH "/etc/pvgpu/guest.conf"

/*
 * The entries of the file at `path` (NULL: $PVGPU_GUEST_CONF, else
 * PVGPU_GUEST_CONF_PATH), joined with commas as in PVGPU_DEVICES; malloc'd,
 * for the caller to free.  NULL when the file is missing, unreadable or
 * lists nothing.
 */
char *pvgpu_guestconf_devices(const char *path);

#endif
