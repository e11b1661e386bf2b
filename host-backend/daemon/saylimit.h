/*
 * saylimit.h - the supervisor's lines about what a caller can make happen
 * at will (a connection closed for the hello budget, a hello refused).
 *
 * Each such line goes through a limit: at most one a second, the next one
 * saying how many were not written meanwhile.  A caller can connect as
 * fast as the network lets it, and the log must stay readable (and its
 * disk not fill) for everybody else's lines.
 *
 * Refusals are limited per source (a network address, else the VM or the
 * channel's identity), so that one host's flood does not hide why another
 * was refused: a table of PVGPU_SAY_SOURCES sources, and one limit shared
 * by the sources it has no room for.  At most that many lines and one a
 * second in all, however many sources there are.
 */
#ifndef PVGPU_SAYLIMIT_H
#define PVGPU_SAYLIMIT_H

#include <stdint.h>

#define PVGPU_SAY_SOURCES	16

/* At most one line a second; the next says how many were not written. */
struct pvgpu_saylimit {
	uint64_t next_ns;
	unsigned long unsaid;
};

struct pvgpu_saysources {
	struct pvgpu_saysource {
		char key[64];
		struct pvgpu_saylimit sl;
	} v[PVGPU_SAY_SOURCES];
	struct pvgpu_saylimit rest;	/* sources past the table */
};

void pvgpu_say(struct pvgpu_saylimit *sl, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
/* pvgpu_say() under source's own limit (source: "" or longer is cut). */
void pvgpu_say_from(struct pvgpu_saysources *t, const char *source,
		    const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#endif /* PVGPU_SAYLIMIT_H */
