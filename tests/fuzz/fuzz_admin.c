/*
 * fuzz_admin.c - libFuzzer target: pvgpud's admin request parser
 * (host-backend/daemon/admin.h) on any bytes an admin caller could send.
 * What it accepts must be one of the three requests, with a session
 * number in range, and say the same when parsed again from its own text.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "admin.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct pvgpu_admin_req req, again;
	char text[PVGPU_ADMIN_LINE_MAX + 32];
	int n;

	if (pvgpu_admin_parse((const char *)data, size, &req))
		return 0;
	switch (req.verb) {
	case PVGPU_ADMIN_LIST:
		n = snprintf(text, sizeof(text), "list");
		break;
	case PVGPU_ADMIN_SUSPEND:
	case PVGPU_ADMIN_RESUME:
		if (req.session == 0 || req.session > INT64_MAX)
			abort();
		n = snprintf(text, sizeof(text), "%s %llu",
			     req.verb == PVGPU_ADMIN_SUSPEND ? "suspend" : "resume",
			     (unsigned long long)req.session);
		break;
	default:
		abort();
	}
	if ((size_t)n != size || memcmp(text, data, size) ||
	    pvgpu_admin_parse(text, (size_t)n, &again) ||
	    again.verb != req.verb || again.session != req.session)
		abort();
	return 0;
}
