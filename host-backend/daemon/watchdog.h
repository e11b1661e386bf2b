/*
 * watchdog.h - a limit on how long one call of a session may run, and
 * on how long a session may sit idle.
 *
 * A worker that hangs (a kernel that never ends, a driver call that never
 * returns) would hold its session, its VM's quota and perhaps a GPU for
 * ever, and its guest would wait for ever.  So the worker stamps, in its
 * accounting slot, when it begins serving each call (every synchronous
 * call, and every queued operation of a batch, since an executor may run
 * those at once: the sim runs a launch's CPU twin then) and clears the
 * stamp when the call is done.  Time the call spends waiting on the guest
 * (reading or sending a copy's DATA frames, a shared window's ring, an
 * exclusive-mode wait, which is bounded on its own) does not count: the
 * stamp moves forward by that much, so a slow guest is never mistaken for
 * a hung device.
 *
 * The supervisor looks every 250 ms and SIGKILLs a worker whose current
 * call has run longer than its limit: the VM's call_timeout from the
 * policy, else pvgpud --call-timeout (default 300 s; 0 turns it off),
 * logging one line that names the session, the VM, the operation and how
 * long it ran.  (A live session of a VM that a reload dropped from the
 * file gets --call-timeout.)  The process boundary frees the rest, as for any worker
 * that dies; the guest sees its connection close.
 *
 * The same tick ends sessions that hold a slot and quota doing nothing:
 * with the VM's idle_timeout set (policy; default 0, never), a session in
 * no call whose guest has sent nothing for that long (its worker may be
 * blocked on a silent guest, or stopped) is SIGKILLed with one log line.
 * The worker stamps guest_seen_ns with the clock reading it takes for the
 * call watchdog anyway, so the stamp costs one store per request.  A call
 * waiting on its guest (a copy's data, a staged copy's slots) counts as
 * idle until the guest answers, as does a ctx_create waiting for an
 * exclusive GPU: keep idle_timeout above exclusive_wait.  Work left on
 * the GPU with no call waiting for it does not count.
 */
#ifndef PVGPU_WATCHDOG_H
#define PVGPU_WATCHDOG_H

#include <stdint.h>

#include "accounting.h"

#define PVGPU_WATCHDOG_TICK_MS	250

/* Worker side: around one call. */
void pvgpu_watchdog_begin(struct pvgpu_slot *slot, uint16_t opcode);
void pvgpu_watchdog_end(struct pvgpu_slot *slot);
/*
 * Around a wait on the guest inside a call: pause returns what resume
 * needs (0 when no call is being served, and then resume does nothing).
 */
uint64_t pvgpu_watchdog_pause(struct pvgpu_slot *slot);
void pvgpu_watchdog_resume(struct pvgpu_slot *slot, uint64_t paused);

/* Supervisor side (supervisor.c owns the timer fd and calls these). */
struct pvgpu_supervisor;

/* 0, or -1 after logging why. */
int pvgpu_watchdog_init(struct pvgpu_supervisor *sv);
void pvgpu_watchdog_fini(struct pvgpu_supervisor *sv);
/*
 * Tick only while some limit is set, or a slot waits to be freed
 * (supervisor.c): after start-up, every reload, and when that changes.
 */
void pvgpu_watchdog_arm(struct pvgpu_supervisor *sv);
/* The timer fired: kill the workers past their limits. */
void pvgpu_watchdog_tick(struct pvgpu_supervisor *sv);
/* For the session-end line: how the watchdog killed its worker, or NULL. */
const char *pvgpu_watchdog_killed(struct pvgpu_supervisor *sv,
				  const struct pvgpu_slot *slot);
void pvgpu_watchdog_forget(struct pvgpu_supervisor *sv,
			   const struct pvgpu_slot *slot);

#endif /* PVGPU_WATCHDOG_H */
