/*
 * oversub.h - GPU memory oversubscription ([gpu N] oversubscribe = FACTOR,
 * policy.h): the supervisor makes room on a full GPU by suspending other
 * sessions (suspend.h), and a suspended session resumes when it is called
 * again, making room the same way.
 *
 * The trigger is the executor's answer: a worker whose allocation the
 * driver refused with CUDA_ERROR_OUT_OF_MEMORY, on a GPU with a factor
 * above 1.0, sets its slot's room_bytes and room_dev, writes the wake
 * eventfd and sleeps on room_seq (worker side: pvgpu_worker_make_room),
 * then retries the allocation once.  The driver's answer, not the
 * accounting's, because only the driver knows what else holds the GPU
 * (other processes, its own reserves, fragmentation); or, where the
 * policy gives VMs only part of the GPU ([gpu N] memory), the worker's
 * own count against that part.  How much to free is the accounting's
 * figure: the GPU's memory as the start-up probe read it (or that part,
 * if smaller), less what every running session holds there.
 *
 * Candidates, least recently heard from first (guest_seen_ns): running
 * sessions holding memory on that GPU, never the asker, never one of an
 * exclusive VM (it was promised the GPU), never one inside a call (its
 * worker cannot be moved mid-call, and its guest is waiting), and never
 * one resumed, or one whose suspend failed, less than
 * PVGPU_OVERSUB_SETTLE_MS ago.  That last rule bounds two sessions that
 * take turns evicting each other to one exchange per settle time: each
 * gets that long on the GPU before it can be moved out again.
 *
 * Where suspending every candidate would still not free enough, none is
 * suspended: a guest's allocation that cannot succeed moves nobody.
 * The supervisor answers when the bytes fit, or when no candidate is
 * left (the allocation then fails as it would without the factor, with
 * one line, rate-limited, in the worker's log).  A resume that finds no
 * room and no candidate is not started; the waiting call asks again a
 * second later (resume.c) until its resume wait runs out.
 */
#ifndef PVGPU_OVERSUB_H
#define PVGPU_OVERSUB_H

#include <stdint.h>

#include "accounting.h"

#define PVGPU_OVERSUB_SETTLE_MS		2000

struct pvgpu_supervisor;

/* Non-zero when device dev of the policy in force has a factor above 1. */
int pvgpu_oversub_on(struct pvgpu_supervisor *sv, int dev);
/* Answer the workers' room requests, starting suspends where needed. */
void pvgpu_oversub_serve(struct pvgpu_supervisor *sv);
/*
 * Before a resume of suspended slot s: 1 when it may start now; 0 when
 * it waits for room (suspends of others under way, or none possible:
 * then its resume_wanted is cleared, for the worker to ask again).
 */
int pvgpu_oversub_resume_ok(struct pvgpu_supervisor *sv, struct pvgpu_slot *s);

#endif /* PVGPU_OVERSUB_H */
