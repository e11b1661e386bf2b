/*
 * devices.c - split the device list (format: devices.h).
 */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "debug.h"
#include "devices.h"

/* Largest GPU index an entry may name: anything past it is a typo. */
#define INDEX_MAX	(1 << 20)

static char *trim(char *s)
{
	char *end;

	while (isspace((unsigned char)*s))
		s++;
	end = s + strlen(s);
	while (end > s && isspace((unsigned char)end[-1]))
		*--end = '\0';
	return s;
}

/* A trailing "#N" off entry into *index (-1 without one); -1: bad N. */
static int split_index(char *entry, int *index)
{
	char *hash = strrchr(entry, '#');
	long n;

	*index = -1;
	if (!hash || !hash[1] || strspn(hash + 1, "0123456789") != strlen(hash + 1))
		return 0;	/* no index: the '#' is part of the URI */
	if (strlen(hash + 1) > 7)
		return -1;
	n = strtol(hash + 1, NULL, 10);
	if (n > INDEX_MAX)
		return -1;
	*hash = '\0';
	*index = (int)n;
	return 0;
}

int pvgpu_devices_parse(const char *list, struct pvgpu_device_entry **out)
{
	struct pvgpu_device_entry *entries;
	char *copy, *save = NULL, *tok;
	size_t max = 1;
	int n = 0;

	*out = NULL;
	for (const char *p = list; *p; p++)
		max += *p == ',';
	copy = strdup(list);
	entries = calloc(max, sizeof(*entries));
	if (!copy || !entries)
		goto err_free;
	for (tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		char *entry = trim(tok);
		int index;

		if (!*entry)
			continue;
		if (split_index(entry, &index) ||
		    strlen(entry) >= sizeof(entries[0].uri)) {
			pvgpu_debug("PVGPU_DEVICES: ignoring '%s'", entry);
			continue;
		}
		memcpy(entries[n].uri, entry, strlen(entry) + 1);
		entries[n].index = index;
		n++;
	}
	free(copy);
	*out = entries;
	return n;

err_free:
	free(copy);
	free(entries);
	return -1;
}

void pvgpu_device_entry_gpus(const struct pvgpu_device_entry *e, int count,
			     int *first, int *end)
{
	if (e->index < 0) {
		*first = 0;
		*end = count;
	} else if (e->index < count) {
		*first = e->index;
		*end = e->index + 1;
	} else {
		pvgpu_debug("%s#%d: the backend has %d GPU(s)", e->uri, e->index,
			    count);
		*first = *end = 0;
	}
}
