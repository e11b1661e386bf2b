/*
 * executor.c - the executors pvgpud can run sessions on, by name.
 *
 * Built in: "cuda".  Any other name is looked for as a plugin,
 * DIR/exec-NAME.so, exporting `pvgpu_executor_plugin` (a pointer to its ops
 * table).  That is how the "sim" test fixture (tests/sim/) reaches pvgpud in
 * the build tree without the production daemon linking it.
 */
#include <dirent.h>
#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "executor.h"

static const struct pvgpu_executor_ops *const builtin[] = {
	&pvgpu_exec_cuda,
};

#define NBUILTIN (sizeof(builtin) / sizeof(builtin[0]))

void pvgpu_executor_default_dir(char *dir, size_t len)
{
	char exe[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	char *slash;

	if (n <= 0) {
		snprintf(dir, len, "%s", PVGPU_EXECUTOR_DIR);
		return;
	}
	exe[n] = '\0';
	slash = strrchr(exe, '/');
	if (slash)
		*slash = '\0';
	/* build/bin/pvgpud -> build/lib/pvgpud; /usr/sbin -> /usr/lib/pvgpud */
	snprintf(dir, len, "%s/../lib/pvgpud", exe);
	if (access(dir, F_OK))
		snprintf(dir, len, "%s", PVGPU_EXECUTOR_DIR);
}

static int valid_name(const char *name)
{
	size_t i;

	for (i = 0; name[i]; i++)
		if (!((name[i] >= 'a' && name[i] <= 'z') ||
		      (name[i] >= '0' && name[i] <= '9') || name[i] == '_'))
			return 0;
	return i > 0 && i < 64;
}

const struct pvgpu_executor_ops *pvgpu_executor_find(const char *name,
						     const char *dir,
						     char *err, size_t errlen)
{
	const struct pvgpu_executor_ops *const *plugin;
	char path[PATH_MAX];
	void *h;
	size_t i;

	for (i = 0; i < NBUILTIN; i++)
		if (!strcmp(builtin[i]->name, name))
			return builtin[i];
	if (!valid_name(name)) {
		snprintf(err, errlen, "no executor \"%s\" (--executor help lists them)",
			 name);
		return NULL;
	}
	snprintf(path, sizeof(path), "%s/exec-%s.so", dir, name);
	h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		snprintf(err, errlen, "no executor \"%s\": %s (--executor help lists them)",
			 name, dlerror());
		return NULL;
	}
	plugin = dlsym(h, "pvgpu_executor_plugin");
	if (!plugin || !*plugin || strcmp((*plugin)->name, name)) {
		snprintf(err, errlen, "%s is not a pvgpud executor for \"%s\"",
			 path, name);
		dlclose(h);
		return NULL;
	}
	return *plugin;		/* stays loaded for the daemon's life */
}

void pvgpu_executor_list(FILE *out, const char *dir)
{
	struct dirent *d;
	DIR *dp;
	size_t i;

	for (i = 0; i < NBUILTIN; i++)
		fprintf(out, "%s\tbuilt in\n", builtin[i]->name);
	dp = opendir(dir);
	if (!dp)
		return;
	while ((d = readdir(dp))) {
		size_t n = strlen(d->d_name);

		if (n > 8 && !strncmp(d->d_name, "exec-", 5) &&
		    !strcmp(d->d_name + n - 3, ".so"))
			fprintf(out, "%.*s\t%s/%s\n", (int)(n - 8),
				d->d_name + 5, dir, d->d_name);
	}
	closedir(dp);
}
