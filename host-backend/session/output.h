/*
 * output.h - device printf and assert output, sent to the guest.
 *
 * The worker takes over fd 1 and 2 at start (the driver writes a
 * kernel's printf there); before the reply to a call where CUDA delivers
 * device output, what the driver wrote goes to the guest in OUTPUT frames.
 */
#ifndef PVGPU_OUTPUT_H
#define PVGPU_OUTPUT_H

#include <stdint.h>

struct pvgpu_worker;

struct pvgpu_output {
	int ok;			/* fd 1/2 hold device output */
	int armed;		/* a kernel has been launched: look */
	uint64_t armed_ctx;	/* the context of all of them; 0: several */
	uint64_t dropped;	/* bytes of it not delivered */
	int quiet;		/* the call now answered wrote none */
};

/* open: at start; arm: at each launch; quiet: the call being answered is
 * not one where CUDA writes output; deliver: before the reply (opcode,
 * status). */
int pvgpu_output_open(struct pvgpu_worker *w);
void pvgpu_output_arm(struct pvgpu_worker *w);
void pvgpu_output_quiet(struct pvgpu_worker *w);
int pvgpu_output_deliver(struct pvgpu_worker *w, uint16_t opcode,
			 int32_t status);

#endif /* PVGPU_OUTPUT_H */
