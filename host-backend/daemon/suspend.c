/* suspend.c - see suspend.h. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "clock.h"
#include "log.h"
#include "oversub.h"
#include "supervisor.h"
#include "suspend.h"

/* What a checkpointer writes on its pipe: each under PIPE_BUF, so whole. */
struct ck_msg {
	int32_t kind;			/* CK_TOUCHED, CK_DONE */
	int32_t rc;			/* CK_DONE: the op's 0, -1 or -2 */
	char text[200];
};
enum { CK_TOUCHED = 1, CK_DONE = 2 };

static const char *const state_names[] = {
	[PVGPU_SLOT_RUNNING] = "running",
	[PVGPU_SLOT_SUSPENDING] = "suspending",
	[PVGPU_SLOT_SUSPENDED] = "suspended",
	[PVGPU_SLOT_RESUMING] = "resuming",
};

static const char *state_name(uint32_t st)
{
	return st < sizeof(state_names) / sizeof(state_names[0]) ? state_names[st] : "?";
}

static const char *slot_vm(struct pvgpu_supervisor *sv, struct pvgpu_slot *s)
{
	int vm = atomic_load(&s->vm);

	return vm < 0 ? "-" : sv->acct->vms[vm].name;
}

/* The worker sleeps on its slot's state (a shared mapping: not private). */
static void set_state(struct pvgpu_slot *s, uint32_t st)
{
	atomic_store(&s->state, st);
	syscall(SYS_futex, &s->state, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

int pvgpu_suspend_init(struct pvgpu_supervisor *sv, uint64_t timeout_ms)
{
	struct pvgpu_suspend *su = &sv->suspend;

	memset(su, 0, sizeof(*su));
	su->timeout_ms = timeout_ms;
	/*
	 * One eventfd for every worker: the supervisor polls one descriptor
	 * however many sessions there are, and looks at the slots' flags
	 * when it fires.  Non-blocking for the writers too: a worker never
	 * waits on it.
	 */
	su->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (su->wake_fd < 0) {
		log_error("eventfd: %s", strerror(errno));
		return -1;
	}
	sv->wcfg.wake_fd = su->wake_fd;
	sv->wcfg.resume_wait_ns = (2 * timeout_ms + 1000) * 1000000ull;
	return 0;
}

void pvgpu_suspend_fini(struct pvgpu_supervisor *sv)
{
	struct pvgpu_suspend *su = &sv->suspend;

	for (int i = 0; i < PVGPU_MAX_CHECKPOINTERS; i++) {
		if (!su->ck[i].pid)
			continue;
		kill(su->ck[i].pid, SIGKILL);
		waitpid(su->ck[i].pid, NULL, 0);
		close(su->ck[i].fd);
		su->ck[i].pid = 0;
	}
	if (su->wake_fd >= 0)
		close(su->wake_fd);
	su->wake_fd = -1;
}

void pvgpu_suspend_forget(struct pvgpu_supervisor *sv)
{
	for (int i = 0; i < PVGPU_MAX_CHECKPOINTERS; i++)
		if (sv->suspend.ck[i].pid)
			close(sv->suspend.ck[i].fd);
}

static void ck_say(int fd, int kind, int rc, const char *text)
{
	struct ck_msg m = { .kind = kind, .rc = rc };

	snprintf(m.text, sizeof(m.text), "%s", text);
	if (write(fd, &m, sizeof(m)) != sizeof(m))
		_exit(3);	/* the supervisor reads no report: a failure */
}

static void ck_touched(void *arg)
{
	ck_say(*(int *)arg, CK_TOUCHED, 0, "");
}

/* The checkpointer: one op on the worker, its outcome on fd, then exit. */
static void checkpointer(struct pvgpu_supervisor *sv, struct pvgpu_ckpt *ck,
			 pid_t worker, pid_t parent, int fd)
{
	const struct pvgpu_executor_ops *ex = sv->wcfg.exec;
	char err[200] = "", prefix[64];
	int rc;

	/* Nobody to report to: the worker is the next supervisor's to end. */
	snprintf(prefix, sizeof(prefix), "session %llu checkpointer",
		 (unsigned long long)ck->session_id);
	pvgpu_supervisor_child(parent, prefix);
	/* Half the deadline: the op's own timeout answers before the kill. */
	rc = ex->checkpoint(worker, ck->resume, sv->suspend.timeout_ms / 2,
			    ck_touched, &fd, err, sizeof(err));
	ck_say(fd, CK_DONE, rc, err);
	_exit(0);
}

int pvgpu_suspend_start(struct pvgpu_supervisor *sv, struct pvgpu_slot *s,
			int resume, char *why, size_t len)
{
	struct pvgpu_suspend *su = &sv->suspend;
	struct pvgpu_ckpt *ck = NULL;
	int p[2];
	pid_t pid, parent = getpid();

	for (int i = 0; i < PVGPU_MAX_CHECKPOINTERS && !ck; i++)
		if (!su->ck[i].pid)
			ck = &su->ck[i];
	if (!ck) {
		snprintf(why, len, "busy: %d suspends and resumes under way",
			 PVGPU_MAX_CHECKPOINTERS);
		return -1;
	}
	if (pipe2(p, O_CLOEXEC)) {
		snprintf(why, len, "pipe: %s", strerror(errno));
		return -1;
	}
	*ck = (struct pvgpu_ckpt){
		.fd = p[0],
		.slot = (uint32_t)(s - sv->acct->slots),
		.session_id = s->session_id,
		.resume = resume,
		.started_ns = pvgpu_now_ns(),
		.bytes = pvgpu_accounting_slot_mem(s),
	};
	ck->deadline_ns = ck->started_ns + su->timeout_ms * 1000000ull;
	/* Before the fork: the worker may look at it at once. */
	if (resume)
		atomic_store(&s->resume_wanted, 0);
	set_state(s, resume ? PVGPU_SLOT_RESUMING : PVGPU_SLOT_SUSPENDING);
	pid = fork();
	if (pid == 0) {
		close(p[0]);
		checkpointer(sv, ck, s->pid, parent, p[1]);
	}
	close(p[1]);
	if (pid < 0) {
		snprintf(why, len, "fork: %s", strerror(errno));
		close(p[0]);
		set_state(s, resume ? PVGPU_SLOT_SUSPENDED : PVGPU_SLOT_RUNNING);
		return -1;
	}
	ck->pid = pid;
	return 0;
}

/* Resumes the workers asked for, as far as checkpointers are free. */
static void start_wanted(struct pvgpu_supervisor *sv)
{
	for (uint32_t i = 0; i < sv->acct->nslots; i++) {
		struct pvgpu_slot *s = &sv->acct->slots[i];
		char why[128];

		if (s->pid <= 0 || !atomic_load(&s->resume_wanted) ||
		    atomic_load(&s->state) != PVGPU_SLOT_SUSPENDED)
			continue;
		if (!pvgpu_oversub_resume_ok(sv, s))
			continue;	/* room is being made, or asked again */
		if (pvgpu_suspend_start(sv, s, 1, why, sizeof(why)))
			break;		/* said when one is free again */
	}
	pvgpu_oversub_serve(sv);
}

void pvgpu_suspend_wake(struct pvgpu_supervisor *sv)
{
	uint64_t n;

	while (read(sv->suspend.wake_fd, &n, sizeof(n)) > 0)
		;
	start_wanted(sv);
}

/* A checkpointer's outcome, from its pipe and its exit. */
static void finish(struct pvgpu_supervisor *sv, struct pvgpu_ckpt *ck,
		   int status)
{
	struct pvgpu_slot *s = &sv->acct->slots[ck->slot];
	struct ck_msg m;
	int touched = 0, done = 0, rc = -1;
	char text[200] = "", bytes[32];
	double secs = (double)(pvgpu_now_ns() - ck->started_ns) / 1e9;
	const char *what = ck->resume ? "resume" : "suspend";

	while (read(ck->fd, &m, sizeof(m)) == sizeof(m)) {
		m.text[sizeof(m.text) - 1] = '\0';
		if (m.kind == CK_TOUCHED)
			touched = 1;
		if (m.kind == CK_DONE) {
			done = 1;
			rc = m.rc;
			snprintf(text, sizeof(text), "%s", m.text);
		}
	}
	close(ck->fd);
	ck->pid = 0;
	if (s->pid <= 0 || s->session_id != ck->session_id)
		return;		/* the session ended meanwhile: said then */
	if (!done && ck->killed)
		snprintf(text, sizeof(text), "no answer within %.1f s (--suspend-timeout)",
			 sv->suspend.timeout_ms / 1e3);
	else if (!done)
		snprintf(text, sizeof(text), "the checkpointer died (status %d)",
			 status);
	pvgpu_human_bytes(ck->bytes, bytes, sizeof(bytes));
	if (done && rc == 0) {
		if (ck->resume)		/* not moved out again at once (oversub.h) */
			atomic_store(&s->resumed_ns, pvgpu_now_ns());
		set_state(s, ck->resume ? PVGPU_SLOT_RUNNING : PVGPU_SLOT_SUSPENDED);
		log_info("session %llu %s: vm %s, %s %s in %.2f s",
			 (unsigned long long)ck->session_id,
			 ck->resume ? "resumed" : "suspended", slot_vm(sv, s),
			 bytes, ck->resume ? "back to the device" : "to host memory",
			 secs);
	} else if ((done && rc == -2) || (!done && touched)) {
		/* Memory half moved, a process left locked: not for a guest. */
		log_warn("session %llu: %s failed after it acted on the worker (%s); its state is unknown: ending the session",
			 (unsigned long long)ck->session_id, what, log_esc(text));
		kill(s->pid, SIGKILL);
	} else {
		/* Not tried again to make room before it settles (oversub.h). */
		if (!ck->resume)
			atomic_store(&s->resumed_ns, pvgpu_now_ns());
		set_state(s, ck->resume ? PVGPU_SLOT_SUSPENDED : PVGPU_SLOT_RUNNING);
		log_warn("session %llu: %s failed: %s; it stays %s",
			 (unsigned long long)ck->session_id, what, log_esc(text),
			 ck->resume ? "suspended" : "running");
	}
	pvgpu_supervisor_publish(sv);
}

int pvgpu_suspend_reaped(struct pvgpu_supervisor *sv, pid_t pid, int status)
{
	for (int i = 0; i < PVGPU_MAX_CHECKPOINTERS; i++) {
		struct pvgpu_ckpt *ck = &sv->suspend.ck[i];

		if (ck->pid != pid)
			continue;
		finish(sv, ck, status);
		start_wanted(sv);	/* a checkpointer is free */
		return 1;
	}
	return 0;
}

int pvgpu_suspend_expire(struct pvgpu_supervisor *sv)
{
	uint64_t now = pvgpu_now_ns(), next = UINT64_MAX;

	for (int i = 0; i < PVGPU_MAX_CHECKPOINTERS; i++) {
		struct pvgpu_ckpt *ck = &sv->suspend.ck[i];

		if (!ck->pid || ck->killed)
			continue;
		if (now >= ck->deadline_ns) {
			/* Its end comes as a SIGCHLD, like any child's. */
			kill(ck->pid, SIGKILL);
			ck->killed = 1;
		} else if (ck->deadline_ns < next) {
			next = ck->deadline_ns;
		}
	}
	return next == UINT64_MAX ? -1 : (int)((next - now + 999999) / 1000000);
}

static struct pvgpu_slot *by_session(struct pvgpu_supervisor *sv, uint64_t id)
{
	for (uint32_t i = 0; i < sv->acct->nslots; i++)
		if (sv->acct->slots[i].pid > 0 &&
		    sv->acct->slots[i].session_id == id)
			return &sv->acct->slots[i];
	return NULL;
}

static char *reply(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static char *reply(const char *fmt, ...)
{
	char *line = NULL;
	va_list ap;

	va_start(ap, fmt);
	if (vasprintf(&line, fmt, ap) < 0)
		line = NULL;
	va_end(ap);
	return line;
}

/* "ok N" and each live session's "ID VM STATE RESIDENT SUSPENDED". */
static char *list(struct pvgpu_supervisor *sv)
{
	size_t cap = 64, len;
	char *out = malloc(cap);
	uint32_t n = 0;

	if (!out)
		return NULL;
	for (uint32_t i = 0; i < sv->acct->nslots; i++)
		n += sv->acct->slots[i].pid > 0;
	len = (size_t)snprintf(out, cap, "ok %u", n);
	for (uint32_t i = 0; i < sv->acct->nslots; i++) {
		struct pvgpu_slot *s = &sv->acct->slots[i];
		uint32_t st = atomic_load(&s->state);
		uint64_t mem = pvgpu_accounting_slot_mem(s);
		char item[160];
		int k;

		if (s->pid <= 0)
			continue;
		k = snprintf(item, sizeof(item), " %llu %s %s %llu %llu",
			     (unsigned long long)s->session_id, slot_vm(sv, s),
			     state_name(st),
			     (unsigned long long)(st == PVGPU_SLOT_SUSPENDED ? 0 : mem),
			     (unsigned long long)(st == PVGPU_SLOT_SUSPENDED ? mem : 0));
		if (len + (size_t)k + 2 > cap) {
			char *more;

			cap = (len + (size_t)k + 2) * 2;
			more = cap <= PVGPU_ADMIN_REPLY_MAX ? realloc(out, cap) : NULL;
			if (!more) {
				free(out);
				return NULL;
			}
			out = more;
		}
		memcpy(out + len, item, (size_t)k);
		len += (size_t)k;
	}
	out[len++] = '\n';
	out[len] = '\0';
	return out;
}

char *pvgpu_suspend_admin(void *arg, const struct pvgpu_admin_req *req)
{
	struct pvgpu_supervisor *sv = arg;
	struct pvgpu_slot *s;
	uint32_t st, want;
	char why[128];
	int resume = req->verb == PVGPU_ADMIN_RESUME;

	if (req->verb == PVGPU_ADMIN_LIST)
		return list(sv);
	s = by_session(sv, req->session);
	if (!s)
		return reply("error no live session %llu\n",
			     (unsigned long long)req->session);
	if (!sv->wcfg.exec->checkpoint)
		return reply("error executor %s cannot suspend sessions\n",
			     sv->wcfg.exec->name);
	st = atomic_load(&s->state);
	want = resume ? PVGPU_SLOT_SUSPENDED : PVGPU_SLOT_RUNNING;
	if (st != want)
		return reply("error session %llu is %s\n",
			     (unsigned long long)req->session, state_name(st));
	if (pvgpu_suspend_start(sv, s, resume, why, sizeof(why)))
		return reply("error %s\n", why);
	return reply("ok %s %llu\n", resume ? "resuming" : "suspending",
		     (unsigned long long)req->session);
}
