/*
 * transport.c - the transport registry: find both halves of a transport by
 * URI scheme, built in (transport/list.h) or loaded at run time from
 * transport-NAME.so.
 */
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "stream.h"
#include "transport.h"

/*
 * Either half of a built-in transport may be missing from this program
 * (the guest library links no host halves): weak, so it reads as NULL.
 */
#define BUILTIN(name)								\
	extern const struct pvgpu_transport_ops pvgpu_guest_##name __attribute__((weak)); \
	extern const struct pvgpu_host_ops pvgpu_host_##name __attribute__((weak));
#define LOADABLE(name)
#include "list.h"
#undef BUILTIN
#undef LOADABLE

struct entry {
	struct pvgpu_transport_module mod;
	int loadable;
};

#define BUILTIN(name) { { PVGPU_TRANSPORT_ABI, #name, &pvgpu_guest_##name, &pvgpu_host_##name }, 0 },
#define LOADABLE(name) { { PVGPU_TRANSPORT_ABI, #name, NULL, NULL }, 1 },
static const struct entry transports[] = {
#include "list.h"
};
#undef BUILTIN
#undef LOADABLE

#define NTRANSPORTS (sizeof(transports) / sizeof(transports[0]))

/* Loaded objects, kept for the life of the process (never dlclosed). */
static pthread_mutex_t loaded_lock = PTHREAD_MUTEX_INITIALIZER;
static const struct pvgpu_transport_module *loaded[NTRANSPORTS];

static void *try_open(const char *dir, const char *sub, const char *name)
{
	char path[PATH_MAX];

	if (snprintf(path, sizeof(path), "%s%s/transport-%s.so", dir, sub, name) >=
	    (int)sizeof(path))
		return NULL;
	return dlopen(path, RTLD_NOW | RTLD_LOCAL);
}

/* dirname of path into dir (no trailing slash); 0, or -1 if it has none. */
static int dir_of(const char *path, char *dir, size_t len)
{
	const char *slash = strrchr(path, '/');

	if (!slash || (size_t)(slash - path) >= len)
		return -1;
	memcpy(dir, path, (size_t)(slash - path));
	dir[slash - path] = '\0';
	return 0;
}

/*
 * transport-name.so from DIR/pvgpu/ and DIR/ (DIR: where the library or
 * program holding this code lives), then <program's dir>/../lib/pvgpu/.
 */
static const struct pvgpu_transport_module *load(const char *name, char *err,
						  size_t errlen)
{
	const struct pvgpu_transport_module *mod;
	char dir[PATH_MAX], exe[PATH_MAX];
	void *h = NULL;
	Dl_info info;
	ssize_t n;

	if (dladdr((void *)load, &info) && info.dli_fname &&
	    !dir_of(info.dli_fname, dir, sizeof(dir))) {
		h = try_open(dir, "/pvgpu", name);
		if (!h)
			h = try_open(dir, "", name);
	}
	n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	if (!h && n > 0) {
		exe[n] = '\0';
		if (!dir_of(exe, dir, sizeof(dir)))
			h = try_open(dir, "/../lib/pvgpu", name);
	}
	if (!h) {
		snprintf(err, errlen, "transport-%s.so not found next to the pvgpu library or program (pvgpu/ beside it, or ../lib/pvgpu/): %s",
			 name, dlerror());
		return NULL;
	}
	mod = dlsym(h, PVGPU_TRANSPORT_SYMBOL);
	if (!mod || mod->abi != PVGPU_TRANSPORT_ABI || !mod->scheme ||
	    strcmp(mod->scheme, name)) {
		snprintf(err, errlen, "transport-%s.so is not a pvgpu transport of this build (no %s, or ABI %u)",
			 name, PVGPU_TRANSPORT_SYMBOL, mod ? mod->abi : 0);
		dlclose(h);
		return NULL;
	}
	return mod;
}

const struct pvgpu_transport_module *pvgpu_transport_find(const char *uri,
							   const char **addr,
							   char *err,
							   size_t errlen)
{
	const char *sep = strstr(uri, "://");
	size_t len;

	if (!sep) {
		snprintf(err, errlen, "'%s' is not a URI (scheme://address)", uri);
		return NULL;
	}
	len = (size_t)(sep - uri);
	for (size_t i = 0; i < NTRANSPORTS; i++) {
		const struct entry *e = &transports[i];
		const struct pvgpu_transport_module *mod = &e->mod;

		if (strlen(e->mod.scheme) != len || strncmp(uri, e->mod.scheme, len))
			continue;
		if (e->loadable) {
			pthread_mutex_lock(&loaded_lock);
			if (!loaded[i])
				loaded[i] = load(e->mod.scheme, err, errlen);
			mod = loaded[i];
			pthread_mutex_unlock(&loaded_lock);
			if (!mod)
				return NULL;
		}
		*addr = sep + 3;
		return mod;
	}
	snprintf(err, errlen, "unknown transport '%.*s'", (int)(len < 32 ? len : 32), uri);
	return NULL;
}

const struct pvgpu_transport_ops *pvgpu_transport_lookup(const char *uri,
							  const char **addr,
							  char *err,
							  size_t errlen)
{
	const struct pvgpu_transport_module *mod =
		pvgpu_transport_find(uri, addr, err, errlen);

	if (mod && !mod->guest) {
		snprintf(err, errlen, "transport %s has no guest half here", mod->scheme);
		return NULL;
	}
	return mod ? mod->guest : NULL;
}

int pvgpu_transport_quiet(struct pvgpu_transport *t)
{
	return t->ops->quiet ? t->ops->quiet(t) : pvgpu_stream_quiet(t);
}
