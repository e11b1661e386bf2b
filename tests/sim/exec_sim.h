/*
 * exec_sim.h - the "sim" executor (a CI fixture, never production): the
 * unit tests and the fuzzer link it directly; pvgpud loads it as
 * build/lib/pvgpud/exec-sim.so.
 */
#ifndef PVGPU_EXEC_SIM_H
#define PVGPU_EXEC_SIM_H

#include "executor.h"

extern const struct pvgpu_executor_ops pvgpu_exec_sim;

/* JIT linking (sim_link.c). */
int32_t pvgpu_sim_link(struct pvgpu_exec *ex, struct pvgpu_link *l);

#endif /* PVGPU_EXEC_SIM_H */
