/*
 * exec_sim.h - the "sim" executor (a CI fixture, never production): the
 * unit tests and the fuzzer link it directly; pvgpud loads it as
 * build/lib/pvgpud/exec-sim.so.
 */
#ifndef PVGPU_EXEC_SIM_H
#define PVGPU_EXEC_SIM_H

#include "executor.h"

extern const struct pvgpu_executor_ops pvgpu_exec_sim;

#endif /* PVGPU_EXEC_SIM_H */
