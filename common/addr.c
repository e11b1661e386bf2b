/* addr.c - see addr.h. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "addr.h"

int pvgpu_uri_split(const char *uri, char *scheme, size_t schemelen,
		    const char **rest)
{
	const char *sep = strstr(uri, "://");
	size_t len;

	if (!sep || sep == uri)
		return -1;
	len = (size_t)(sep - uri);
	if (len >= schemelen)
		return -1;
	memcpy(scheme, uri, len);
	scheme[len] = '\0';
	*rest = sep + 3;
	return 0;
}

static int parse_u32(const char *s, const char *stop, unsigned int *out)
{
	unsigned long v;
	char *end;

	if (*s < '0' || *s > '9')
		return -1;
	errno = 0;
	v = strtoul(s, &end, 10);
	if (errno || end != stop || v > 0xffffffffUL)
		return -1;
	*out = (unsigned int)v;
	return 0;
}

static int split_host_port(const char *addr, char *host, size_t hostlen,
			   char *port, size_t portlen, unsigned int min_port)
{
	const char *start = addr, *end, *colon;
	unsigned int n;

	if (*addr == '[') {
		/* An IPv6 literal holds colons of its own: brackets delimit it. */
		start = addr + 1;
		end = strchr(start, ']');
		if (!end || end[1] != ':')
			return -1;
		colon = end + 1;
	} else {
		colon = strrchr(addr, ':');
		if (!colon)
			return -1;
		end = colon;
	}
	if (end == start || (size_t)(end - start) >= hostlen ||
	    !colon[1] || strlen(colon + 1) >= portlen)
		return -1;
	if (parse_u32(colon + 1, colon + strlen(colon), &n) || n < min_port ||
	    n > 65535)
		return -1;
	memcpy(host, start, (size_t)(end - start));
	host[end - start] = '\0';
	strcpy(port, colon + 1);
	return 0;
}

int pvgpu_host_port(const char *addr, char *host, size_t hostlen,
		    char *port, size_t portlen)
{
	return split_host_port(addr, host, hostlen, port, portlen, 1);
}

int pvgpu_listen_host_port(const char *addr, char *host, size_t hostlen,
			   char *port, size_t portlen)
{
	return split_host_port(addr, host, hostlen, port, portlen, 0);
}

int pvgpu_vsock_addr(const char *addr, int allow_any, unsigned int *cid,
		     unsigned int *port)
{
	const char *colon = strchr(addr, ':');

	if (!colon || parse_u32(colon + 1, colon + strlen(colon), port))
		return -1;
	if (allow_any && colon - addr == 3 && !strncmp(addr, "any", 3)) {
		*cid = PVGPU_VSOCK_CID_ANY;
		return 0;
	}
	return parse_u32(addr, colon, cid);
}
