/*
 * guestconf.c - read /etc/pvgpu/guest.conf (format: guestconf.h).
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "guestconf.h"

char *pvgpu_guestconf_devices(const char *path)
{
	char line[1024], *list = NULL;
	size_t len = 0;
	FILE *f;

	if (!path)
		path = getenv("PVGPU_GUEST_CONF");
	if (!path || !*path)
		path = PVGPU_GUEST_CONF_PATH;
	f = fopen(path, "re");
	if (!f)
		return NULL;
	while (fgets(line, sizeof(line), f)) {
		char *s = line, *end;
		size_t n;

		while (isspace((unsigned char)*s))
			s++;
		/* A comment: the whole line, or from a '#' after a blank. */
		for (end = s; *end && !(*end == '#' && (end == s ||
				isspace((unsigned char)end[-1]))); end++)
			;
		while (end > s && isspace((unsigned char)end[-1]))
			end--;
		n = (size_t)(end - s);
		if (!n)
			continue;
		char *grown = realloc(list, len + n + 2);
		if (!grown) {
			free(list);
			list = NULL;
			break;
		}
		list = grown;
		if (len)
			list[len++] = ',';
		memcpy(list + len, s, n);
		len += n;
		list[len] = '\0';
	}
	fclose(f);
	return list;
}
