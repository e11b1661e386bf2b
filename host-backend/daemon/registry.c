/* registry.c - reading the VM registry qemu-device writes (see registry.h). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#ifndef PVGPU_NO_INIH
#include <ini.h>
#endif
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "log.h"
#include "registry.h"
#include "size.h"
#include "window.h"

/* One file being parsed, and why it was refused. */
struct entry_state {
	struct pvgpu_vm_record *rec;
	int format;
	int have_cid, have_transport;
	char why[200];
};

static int refuse(struct entry_state *st, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(st->why, sizeof(st->why), fmt, ap);
	va_end(ap);
	return 0;	/* inih: stop, report this line */
}

static int parse_u64(const char *s, int base, uint64_t max, uint64_t *out)
{
	unsigned long long v;
	char *end;

	errno = 0;
	v = strtoull(s, &end, base);
	if (end == s || *end || errno || *s == '-' || v > max)
		return -1;
	*out = v;
	return 0;
}

/* The VM name rule of qemu-device: [A-Za-z0-9][A-Za-z0-9._-]{0,62}. */
static int valid_name(const char *s)
{
	size_t n = strlen(s);

	if (n == 0 || n >= PVGPU_VM_NAME_LEN ||
	    !((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') ||
	      (*s >= '0' && *s <= '9')))
		return 0;
	return strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
			 "0123456789._-") == n;
}

static int copy_path(char *dst, size_t len, const char *value)
{
	if (value[0] != '/' || strlen(value) >= len)
		return -1;
	strcpy(dst, value);
	return 0;
}

static int on_key(void *user, const char *section, const char *key,
		  const char *value)
{
	struct entry_state *st = user;
	struct pvgpu_vm_record *r = st->rec;
	uint64_t v;

	if (*section)
		return refuse(st, "unexpected section [%s]", section);
	if (!strcmp(key, "format")) {
		if (strcmp(value, "1"))
			return refuse(st, "format %s (this pvgpud reads 1)", value);
		st->format = 1;
	} else if (!strcmp(key, "vm")) {
		if (!valid_name(value))
			return refuse(st, "vm = %s is not a VM name", value);
		strcpy(r->name, value);
	} else if (!strcmp(key, "window.path")) {
		if (copy_path(r->window.path, sizeof(r->window.path), value))
			return refuse(st, "window.path is not an absolute path that fits");
	} else if (!strcmp(key, "window.size")) {
		if (pvgpu_parse_size(value, &r->window.size))
			return refuse(st, "window.size = %s", value);
	} else if (!strcmp(key, "window.id")) {
		if (strncmp(value, "0x", 2) ||
		    parse_u64(value + 2, 16, UINT64_MAX, &r->window.id))
			return refuse(st, "window.id = %s", value);
	} else if (!strcmp(key, "window.staging_offset")) {
		if (parse_u64(value, 10, UINT64_MAX, &r->window.staging_offset))
			return refuse(st, "window.staging_offset = %s", value);
	} else if (!strcmp(key, "window.slot_size")) {
		if (pvgpu_parse_size(value, &v) || v > UINT32_MAX)
			return refuse(st, "window.slot_size = %s", value);
		r->window.slot_size = (uint32_t)v;
	} else if (!strcmp(key, "window.nslots")) {
		if (parse_u64(value, 10, UINT32_MAX, &v))
			return refuse(st, "window.nslots = %s", value);
		r->window.nslots = (uint32_t)v;
	} else if (!strcmp(key, "vsock.transport")) {
		if (!strcmp(value, "kernel"))
			r->vhost_user = 0;
		else if (!strcmp(value, "vhost-user"))
			r->vhost_user = 1;
		else
			return refuse(st, "vsock.transport = %s", value);
		st->have_transport = 1;
	} else if (!strcmp(key, "vsock.cid")) {
		/* 0-2 are the hypervisor, local and host; -1U is "any". */
		if (parse_u64(value, 10, UINT32_MAX - 1, &v) || v < 3)
			return refuse(st, "vsock.cid = %s", value);
		r->cid = (unsigned int)v;
		st->have_cid = 1;
	} else if (!strcmp(key, "vsock.port")) {
		if (parse_u64(value, 10, UINT32_MAX - 1, &v))
			return refuse(st, "vsock.port = %s", value);
		r->port = (unsigned int)v;
	} else if (!strcmp(key, "vsock.listen")) {
		if (copy_path(r->listen, sizeof(r->listen), value))
			return refuse(st, "vsock.listen is not an absolute socket path that fits");
	} else if (!strcmp(key, "gpu")) {
		if (parse_u64(value, 10, 31, &v))
			return refuse(st, "gpu = %s", value);
		r->gpu = (unsigned int)v;
	} else if (!strcmp(key, "memory")) {
		if (pvgpu_parse_size(value, &r->memory))
			return refuse(st, "memory = %s", value);
	}
	/* Other keys (vsock.socket, qemu.uid, ...) are for others: ignored. */
	return 1;
}

static int entry_complete(struct entry_state *st)
{
	struct pvgpu_vm_record *r = st->rec;

	if (!st->format)
		return refuse(st, "no format = 1");
	if (!r->name[0])
		return refuse(st, "no vm name");
	if (!st->have_transport || !st->have_cid)
		return refuse(st, "no vsock.transport or vsock.cid");
	if (r->vhost_user && !r->listen[0])
		return refuse(st, "vhost-user without vsock.listen");
	return 1;
}

/* Every window field present, or the window is not used. */
static int window_described(const struct pvgpu_vm_window *w)
{
	return w->path[0] && w->size && w->staging_offset && w->slot_size &&
	       w->nslots;
}

int pvgpu_vm_window_open(const struct pvgpu_vm_window *w, char *err,
			 size_t errlen)
{
	struct pvgpu_window_header hdr;
	struct stat st;
	int fd;

	fd = open(w->path, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0) {
		snprintf(err, errlen, "window %s: %s", w->path, strerror(errno));
		return -1;
	}
	if (fstat(fd, &st) || !S_ISREG(st.st_mode)) {
		snprintf(err, errlen, "window %s is not a regular file", w->path);
		goto err_close;
	}
	if ((uint64_t)st.st_size != w->size) {
		snprintf(err, errlen, "window %s: its size disagrees (%llu bytes, registered %llu)",
			 w->path, (unsigned long long)st.st_size,
			 (unsigned long long)w->size);
		goto err_close;
	}
	if (pread(fd, &hdr, sizeof(hdr), 0) != (ssize_t)sizeof(hdr)) {
		snprintf(err, errlen, "window %s: cannot read its header", w->path);
		goto err_close;
	}
	if (hdr.magic != PVGPU_WINDOW_MAGIC || hdr.layout != PVGPU_WINDOW_LAYOUT) {
		snprintf(err, errlen, "window %s: its magic is 0x%08x layout %u, not a pvgpu layout %u window",
			 w->path, hdr.magic, hdr.layout, PVGPU_WINDOW_LAYOUT);
		goto err_close;
	}
	if (hdr.size != w->size || hdr.window_id != w->id ||
	    hdr.staging_offset != w->staging_offset ||
	    hdr.slot_size != w->slot_size || hdr.nslots != w->nslots) {
		snprintf(err, errlen, "window %s: its header (size %llu, id 0x%016llx) disagrees with the registry (size %llu, id 0x%016llx)",
			 w->path, (unsigned long long)hdr.size,
			 (unsigned long long)hdr.window_id,
			 (unsigned long long)w->size, (unsigned long long)w->id);
		goto err_close;
	}
	return fd;

err_close:
	close(fd);
	return -1;
}

#ifndef PVGPU_NO_INIH
/* One DIR/NAME.conf into r; 0, or -1 after logging why it is left out. */
static int load_entry(const char *path, struct pvgpu_vm_record *r)
{
	struct entry_state st = { .rec = r };
	char err[400];
	int line, fd;

	memset(r, 0, sizeof(*r));
	line = ini_parse(path, on_key, &st);
	if (line < 0) {
		log_warn("registry: %s left out: cannot read it", log_esc(path));
		return -1;
	}
	if (line > 0) {
		log_warn("registry: %s:%d left out: %s", log_esc(path), line,
			 st.why[0] ? log_esc(st.why) : "syntax error");
		return -1;
	}
	if (!entry_complete(&st)) {
		log_warn("registry: %s left out: %s", log_esc(path),
			 log_esc(st.why));
		return -1;
	}
	if (!window_described(&r->window)) {
		r->window.path[0] = '\0';
		return 0;
	}
	/* Checked now so the operator hears of it at once; again at attach. */
	fd = pvgpu_vm_window_open(&r->window, err, sizeof(err));
	if (fd < 0) {
		log_warn("registry: vm %s has no usable window (vsock only): %s",
			 r->name, err);
		r->window.path[0] = '\0';
		return 0;
	}
	close(fd);
	return 0;
}
#endif

/* What the channel says of a registered VM's callers: its CID today. */
static void record_identity(const struct pvgpu_vm_record *rec,
			    struct pvgpu_identity *id)
{
	memset(id, 0, sizeof(*id));
	id->kind = PVGPU_ID_CID;
	snprintf(id->value, sizeof(id->value), "%u", rec->cid);
}

int pvgpu_registry_load(const char *dir, struct pvgpu_registry *r,
			char *err, size_t errlen)
{
#ifdef PVGPU_NO_INIH
	(void)on_key;
	(void)entry_complete;
	(void)window_described;
	r->nvms = 0;
	snprintf(err, errlen,
		 "cannot read the registry %s: this pvgpud was built without inih (libinih-dev)",
		 dir);
	return -1;
#else
	struct pvgpu_identity id;
	struct dirent *de;
	DIR *d;

	r->nvms = 0;
	d = opendir(dir);
	if (!d) {
		snprintf(err, errlen, "registry %s: %s", dir, strerror(errno));
		return -1;
	}
	while ((de = readdir(d))) {
		size_t n = strlen(de->d_name);
		struct pvgpu_vm_record *rec;
		char path[PVGPU_PATH_LEN * 2];

		/* pvgpu-vm writes NAME.conf via a temporary ".NAME..." file. */
		if (de->d_name[0] == '.' || n < 6 ||
		    strcmp(de->d_name + n - 5, ".conf"))
			continue;
		if (r->nvms == PVGPU_REGISTRY_MAX) {
			log_warn("registry: more than %d VMs; %s and later ones left out",
				 PVGPU_REGISTRY_MAX, log_esc(de->d_name));
			break;
		}
		snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
		rec = &r->vms[r->nvms];
		if (load_entry(path, rec))
			continue;
		record_identity(rec, &id);
		if (pvgpu_registry_by_name(r, rec->name) ||
		    pvgpu_registry_lookup(r, &id)) {
			log_warn("registry: %s left out: vm %s or cid %u is already registered",
				 log_esc(path), rec->name, rec->cid);
			continue;
		}
		r->nvms++;
	}
	closedir(d);
	return 0;
#endif
}

const struct pvgpu_vm_record *pvgpu_registry_lookup(const struct pvgpu_registry *r,
						    const struct pvgpu_identity *id)
{
	struct pvgpu_identity mine;

	for (unsigned int i = 0; i < r->nvms; i++) {
		record_identity(&r->vms[i], &mine);
		if (pvgpu_identity_equal(&mine, id))
			return &r->vms[i];
	}
	return NULL;
}

const struct pvgpu_vm_record *pvgpu_registry_by_name(const struct pvgpu_registry *r,
						     const char *name)
{
	for (unsigned int i = 0; i < r->nvms; i++)
		if (!strcmp(r->vms[i].name, name))
			return &r->vms[i];
	return NULL;
}
