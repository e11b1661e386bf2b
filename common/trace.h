/*
 * trace.h - timestamps on the round trip of a call, for finding where the
 * microseconds of a synchronous call go.  Only a build made
 * with -DPVGPU_TRACE records anything (e.g. `make BUILD=build-trace
 * CC="cc -DPVGPU_TRACE"`); in every other build these are empty inline
 * functions and cost nothing.
 *
 * Each side marks (request id, point) with the monotonic clock, which
 * both processes of one machine share; at exit (the guest) or session end
 * (the worker) the marks go to /tmp/pvgpu-trace-PID.txt, one "id point ns"
 * a line, and scripts/trace_breakdown.py joins guest and worker by id.
 */
#ifndef PVGPU_TRACE_H
#define PVGPU_TRACE_H

#include <stdint.h>

/* The points, in the order a synchronous call passes them. */
enum pvgpu_trace_point {
	PVGPU_TR_G_ENTER = 0,	/* guest: pvgpu_client_call entered */
	PVGPU_TR_G_SENT,	/* guest: request published (ring) / written */
	PVGPU_TR_W_HDR,		/* worker: request header read */
	PVGPU_TR_W_PAYLOAD,	/* worker: payload read, before dispatch */
	PVGPU_TR_W_DONE,	/* worker: handler (executor) returned */
	PVGPU_TR_W_OUTPUT,	/* worker: device output looked at, before the reply */
	PVGPU_TR_W_SENT,	/* worker: reply published */
	PVGPU_TR_G_HDR,		/* guest: reply header read */
	PVGPU_TR_G_RETURN,	/* guest: pvgpu_client_call returns */
	PVGPU_TR_OPCODE = 0x10000,	/* + the call's opcode, marked at entry */
	/* A staged copy's blocks, + the block's index (up to 0xffff): */
	PVGPU_TR_G_BLOCK = 0x20000,	/* guest: block copied into/out of its slot */
	PVGPU_TR_W_ISSUE = 0x30000,	/* worker: block's DMA issued */
	PVGPU_TR_W_RETIRE = 0x40000,	/* worker: block's DMA done, counter moved */
};

#define PVGPU_TR_BLOCK(base, k)	((base) + (unsigned int)((k) < 0xffff ? (k) : 0xffff))

#ifdef PVGPU_TRACE
void pvgpu_trace_mark(uint64_t id, unsigned int point);
void pvgpu_trace_dump(void);
#else
static inline void pvgpu_trace_mark(uint64_t id, unsigned int point)
{
	(void)id;
	(void)point;
}

static inline void pvgpu_trace_dump(void)
{
}
#endif

#endif /* PVGPU_TRACE_H */
