/*
 * runs.c - identical launches queued back to back, launched together.
 *
 * A program that launches faster than the driver takes launches (an
 * empty kernel costs the driver 3-4 us of CPU; a loop of small in-place
 * operations is the same) fills the control ring: the guest is then ahead
 * of the worker by thousands of messages, and the worker, making one
 * driver call per launch as native does, can at best equal native.  When
 * the launch just read is the same as the last one (function, shape,
 * stream, parameter bytes) and the guest's next message is already
 * waiting, the worker holds it instead of launching it; PVGPU_LAUNCH_RUN
 * of them go to the executor as one run (launch, run set: the CUDA executor
 * launches a cached graph of that many kernel nodes, one driver call).
 * Nothing is held while the guest is not ahead: the first launch of a run
 * is launched at once, a launch whose next message has not arrived too,
 * and anything other than the same launch (a synchronize, a copy, another
 * kernel) first launches what is held, so the order of work on every
 * stream is the guest's.  A launch is held only when the message waiting
 * is as long as it (a synchronize behind a launch does not hold it back).
 * Errors are the async ones they always were: the first is the next
 * reply's.
 */
#include <string.h>

#include "worker.h"

static int same_launch(const struct pvgpu_run *r,
		       const struct pvgpu_launch_kernel_req *q)
{
	const struct pvgpu_launch_kernel_req *p = &r->req;

	return p->func == q->func && p->stream == q->stream &&
	       p->grid_x == q->grid_x && p->grid_y == q->grid_y &&
	       p->grid_z == q->grid_z && p->block_x == q->block_x &&
	       p->block_y == q->block_y && p->block_z == q->block_z &&
	       p->shared_bytes == q->shared_bytes &&
	       p->params_len == q->params_len &&
	       !memcmp(r->params, q->params, q->params_len);
}

int pvgpu_run_take(struct pvgpu_worker *w,
		   const struct pvgpu_launch_kernel_req *req)
{
	struct pvgpu_run *r = &w->run;
	/* The message before this one was this same launch. */
	int again = r->last && r->last + 1 == w->served && same_launch(r, req);

	r->last = w->served;
	if (r->count && again) {
		if (++r->count == PVGPU_LAUNCH_RUN || !pvgpu_worker_next_alike(w))
			pvgpu_run_flush(w);
		return 1;
	}
	pvgpu_run_flush(w);
	if (!again) {
		/*
		 * Launched at once, and remembered: a run begins with the
		 * second of its launches.  (A launch between other calls, as
		 * in launch-and-synchronize loops, never waits for a look at
		 * the guest's next message.)
		 */
		if (req->params_len > sizeof(r->params)) {
			r->last = 0;
			return 0;
		}
		r->req = *req;
		memcpy(r->params, req->params, req->params_len);
		r->req.params = r->params;
		return 0;
	}
	/*
	 * While a stream captures, launches become the guest's graph's
	 * nodes, one each, as the guest made them; while VMs take turns on
	 * the GPU, a turn ends between two launches, not after 32.
	 */
	if (!w->ex_ops->takes_runs || w->capturing ||
	    !pvgpu_worker_next_alike(w) ||
	    pvgpu_sched_shared(&w->sched, pvgpu_cur_device(w)))
		return 0;
	r->count = 1;
	return 1;
}

/* The held launch, once: as a run of PVGPU_LAUNCH_RUN (run set), or alone. */
static int32_t launch_held(struct pvgpu_worker *w, int run)
{
	const struct pvgpu_launch_kernel_req *q = &w->run.req;
	struct pvgpu_launch l = { PVGPU_LAUNCH_SHAPE(q) };

	return pvgpu_kernel_launch(w, &l, q->func, q->stream, run);
}

void pvgpu_run_flush(struct pvgpu_worker *w)
{
	uint32_t n = w->run.count;
	int32_t st;

	if (!n)
		return;
	w->run.count = 0;
	if (n == PVGPU_LAUNCH_RUN) {
		st = launch_held(w, 1);
		if (st != PVGPU_EXEC_DECLINED) {
			n = 0;
			if (st)
				pvgpu_worker_async_failed(w, PVGPU_OP_LAUNCH_KERNEL, st);
			else
				w->runs++;
		}
	}
	while (n--) {
		st = launch_held(w, 0);
		if (st)
			pvgpu_worker_async_failed(w, PVGPU_OP_LAUNCH_KERNEL, st);
	}
}
