/*
 * config_env.h - a front-end's start-up: the PVGPU_* environment read once
 * into the client's configuration (guest-lib/client/client.h).  Both the
 * driver front-end (libcuda.so.1) and NVML call this, so the
 * variables mean the same whichever library a program loads; the client
 * itself never reads the environment.
 */
#ifndef PVGPU_CONFIG_ENV_H
#define PVGPU_CONFIG_ENV_H

#include "client.h"

/*
 * The defaults, then PVGPU_DEVICES, PVGPU_TOKEN, PVGPU_BLOCK_SIZE,
 * PVGPU_POLL_US, PVGPU_WAIT_SPIN_US, PVGPU_COPY_THREADS, PVGPU_WINDOW_DEVICE,
 * PVGPU_WINDOW_SIZE, PVGPU_STAGING_SLOT, PVGPU_STAGING_SLOTS,
 * PVGPU_WITHHOLD_FEATURES and the flags PVGPU_RING, PVGPU_RING_BATCH and
 * PVGPU_DEBUG ("0" off, any other value on) over them.  An empty variable
 * counts as unset.  A malformed value is ignored (the default stays), with
 * a debug line: a typo must not stop a program that would run without the
 * setting.
 */
void pvgpu_config_from_env(struct pvgpu_client_config *cfg);

#endif /* PVGPU_CONFIG_ENV_H */
