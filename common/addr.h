/*
 * addr.h - the addresses in pvgpu's URIs (DESIGN §6, §8), parsed in one
 * place for pvgpud's --listen and the guest's PVGPU_DEVICES alike:
 *
 *   scheme://rest        the scheme picks the transport
 *   HOST:PORT            tcp, verbs: a name, an IPv4 address or [IPv6]:PORT,
 *                        PORT in decimal, 1..65535
 *   CID:PORT, any:PORT   vsock
 */
#ifndef PVGPU_ADDR_H
#define PVGPU_ADDR_H

#include <stddef.h>

/*
 * The scheme of uri into scheme (NUL-terminated) and *rest after "://";
 * 0, or -1 when uri has no scheme or it does not fit.
 */
int pvgpu_uri_split(const char *uri, char *scheme, size_t schemelen,
		    const char **rest);

/*
 * "host:port" or "[v6addr]:port" into host (brackets removed) and port;
 * 0, or -1 when either part is empty or does not fit, or port is not a
 * decimal number 1..65535 (getaddrinfo would take 99999 as 34463, and a
 * service name as whatever /etc/services says).
 */
int pvgpu_host_port(const char *addr, char *host, size_t hostlen,
		    char *port, size_t portlen);

/*
 * The same for an address to listen on, where port 0 is allowed: any free
 * port, which the listener then names in the URI it reports (--ready-fd).
 */
int pvgpu_listen_host_port(const char *addr, char *host, size_t hostlen,
			   char *port, size_t portlen);

/* The wildcard CID of "any:PORT" (VMADDR_CID_ANY). */
#define PVGPU_VSOCK_CID_ANY	0xffffffffu

/*
 * "CID:PORT", or "any:PORT" when allow_any (listening); 0, or -1 when
 * either is not a 32-bit number.
 */
int pvgpu_vsock_addr(const char *addr, int allow_any, unsigned int *cid,
		     unsigned int *port);

#endif /* PVGPU_ADDR_H */
