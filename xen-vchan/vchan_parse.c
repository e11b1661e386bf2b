/*
 * vchan_parse.c - vchan:// addresses (vchan_guest.h); no libxen, so the
 * fuzz test links it alone.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vchan_guest.h"

int pvgpu_vchan_parse(const char *addr, unsigned int *domid, char *path,
		      size_t pathlen, int self)
{
	char *end;
	unsigned long d;
	const char *name;
	size_t n;
	int w;

	d = strtoul(addr, &end, 10);
	if (end == addr || *end != '/' || d >= 0x7ff0)	/* DOMID_FIRST_RESERVED */
		return -EINVAL;
	name = end + 1;
	n = strcspn(name, "#");		/* "#N" picks a GPU: not ours */
	if (n == 0 || n > 200)
		return -EINVAL;
	for (size_t i = 0; i < n; i++)
		if (!((name[i] >= 'a' && name[i] <= 'z') || (name[i] >= 'A' && name[i] <= 'Z') ||
		      (name[i] >= '0' && name[i] <= '9') || strchr("-_/.@", name[i])))
			return -EINVAL;
	if (name[0] == '/')
		w = snprintf(path, pathlen, "%.*s", (int)n, name);
	else
		w = snprintf(path, pathlen, "/local/domain/%lu/data/%.*s/%d",
			     d, (int)n, name, self);
	if (w < 0 || (size_t)w >= pathlen)
		return -ENAMETOOLONG;
	*domid = (unsigned int)d;
	return 0;
}
