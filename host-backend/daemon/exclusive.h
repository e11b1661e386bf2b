/*
 * exclusive.h - mode = exclusive (policy.h): a VM that has its GPUs alone.
 *
 * The unit is a context: context creation is where a session picks a
 * device.  Each slot says on which devices its session holds contexts
 * (gpus_held); a session may take a device only if no live session of
 * another VM holds it where either VM is exclusive.  Check and take happen
 * under the table's gpu_lock, so of two workers racing for one GPU exactly
 * one wins, whatever processes they are in.  A refused caller polls for up
 * to its VM's exclusive_wait (a bounded wait; the device is free again as
 * soon as the holder destroys its last context there, or its worker ends
 * and the supervisor frees its slot), then gets
 * CUDA_ERROR_DEVICE_UNAVAILABLE, the driver's answer for a device in an
 * exclusive compute mode.
 */
#ifndef PVGPU_EXCLUSIVE_H
#define PVGPU_EXCLUSIVE_H

#include <stdint.h>

#include "accounting.h"

struct pvgpu_conn;
struct pvgpu_log_limit;

/*
 * Before creating a context on dev: CUDA_SUCCESS with dev taken for this
 * session (in slot->gpus_held), or CUDA_ERROR_DEVICE_UNAVAILABLE after
 * logging why (within the session's log limit, lim).  Free for a session
 * that already holds dev.  conn is the session's connection: a guest that
 * hangs up ends the wait early.
 */
int32_t pvgpu_exclusive_take(struct pvgpu_accounting *acct,
			     struct pvgpu_slot *slot, int dev,
			     struct pvgpu_conn *conn,
			     struct pvgpu_log_limit *lim);
/* The session no longer holds any context on dev. */
void pvgpu_exclusive_drop(struct pvgpu_slot *slot, int dev);

#endif /* PVGPU_EXCLUSIVE_H */
