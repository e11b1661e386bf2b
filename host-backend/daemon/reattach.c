/* reattach.c - see reattach.h. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cuda.h>

#include "log.h"
#include "reattach.h"
#include "stream.h"
#include "supervisor.h"

int pvgpu_reattach_init(struct pvgpu_supervisor *sv)
{
	sv->reattach = calloc(sv->acct->nslots, sizeof(*sv->reattach));
	if (!sv->reattach)
		return -1;
	for (uint32_t i = 0; i < sv->acct->nslots; i++)
		sv->reattach[i].fd = -1;
	return 0;
}

void pvgpu_reattach_fini(struct pvgpu_supervisor *sv)
{
	if (!sv->reattach)
		return;
	for (uint32_t i = 0; i < sv->acct->nslots; i++)
		pvgpu_reattach_end(sv, i);
	free(sv->reattach);
	sv->reattach = NULL;
}

void pvgpu_reattach_prepare(struct pvgpu_supervisor *sv, uint32_t i,
			    const struct pvgpu_peer *peer,
			    const struct pvgpu_listener *l, int *worker_fd)
{
	struct pvgpu_reattach *r = &sv->reattach[i];
	int sp[2];

	*worker_fd = -1;
	pvgpu_reattach_end(sv, i);
	/* No token, no socket: the worker would offer no resume anyway. */
	if (!(l->features & PVGPU_TR_REATTACH) ||
	    pvgpu_policy_resume_grace_ms(sv->policy,
					 atomic_load(&sv->acct->slots[i].vm)) <= 0)
		return;
	if (getrandom(r->token, sizeof(r->token), GRND_NONBLOCK) !=
	    (ssize_t)sizeof(r->token) || !(r->token[0] | r->token[1])) {
		memset(r->token, 0, sizeof(r->token));
		return;
	}
	/* Ours never blocks: a worker that does not read cannot stop us. */
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sp)) {
		log_warn("no resume for this session: socketpair: %s",
			 strerror(errno));
		memset(r->token, 0, sizeof(r->token));
		return;
	}
	if (fcntl(sp[0], F_SETFL, O_NONBLOCK)) {
		close(sp[0]);
		close(sp[1]);
		memset(r->token, 0, sizeof(r->token));
		return;
	}
	r->fd = sp[0];
	r->id = peer->id;
	snprintf(r->lvm, sizeof(r->lvm), "%s", l->vm);
	*worker_fd = sp[1];
}

void pvgpu_reattach_child(struct pvgpu_supervisor *sv, uint32_t i,
			  int worker_fd)
{
	sv->wcfg.reattach_fd = worker_fd;
	memcpy(sv->wcfg.resume_token, sv->reattach[i].token,
	       sizeof(sv->wcfg.resume_token));
	/* Other sessions' ends and tokens are not a worker's to hold. */
	for (uint32_t k = 0; k < sv->acct->nslots; k++) {
		struct pvgpu_reattach *r = &sv->reattach[k];

		if (r->fd >= 0)
			close(r->fd);
		r->fd = -1;
		explicit_bzero(r->token, sizeof(r->token));
	}
}

void pvgpu_reattach_end(struct pvgpu_supervisor *sv, uint32_t i)
{
	struct pvgpu_reattach *r = &sv->reattach[i];

	if (r->fd >= 0)
		close(r->fd);
	r->fd = -1;
	explicit_bzero(r->token, sizeof(r->token));
	r->lvm[0] = '\0';
}

static int same_caller(const struct pvgpu_reattach *r,
		       const struct pvgpu_peer *peer,
		       const struct pvgpu_listener *l)
{
	return pvgpu_identity_equal(&r->id, &peer->id) && !strcmp(r->lvm, l->vm);
}

int pvgpu_reattach_expected(const struct pvgpu_supervisor *sv,
			    const struct pvgpu_peer *peer,
			    const struct pvgpu_listener *l)
{
	int found = 0;

	if (!(l->features & PVGPU_TR_REATTACH))
		return 0;
	for (uint32_t i = 0; i < sv->acct->nslots; i++) {
		const struct pvgpu_slot *slot = &sv->acct->slots[i];

		if (sv->reattach[i].fd < 0 || slot->pid <= 0 ||
		    !same_caller(&sv->reattach[i], peer, l))
			continue;
		if (atomic_load(&slot->detached) != PVGPU_ATTACHED)
			return 2;
		found = 1;
	}
	return found;
}

/* The hello and the connection to slot i's worker, without waiting. */
static int hand_over(struct pvgpu_reattach *r, const struct pvgpu_pending *p)
{
	struct iovec iov = { (void *)p->msg, p->got };
	ssize_t n = pvgpu_sock_send_fd(r->fd, &iov, 1, p->conn->fd,
				       MSG_DONTWAIT | MSG_NOSIGNAL);

	return n == (ssize_t)p->got ? 0 : n < 0 ? (int)n : -EIO;
}

int pvgpu_reattach_try(struct pvgpu_supervisor *sv,
		       const struct pvgpu_pending *p,
		       const struct pvgpu_hello_req *req, char *why,
		       size_t whylen)
{
	struct pvgpu_reattach *r = NULL;
	uint32_t want = PVGPU_DETACHED;
	struct pvgpu_slot *slot;
	int rc;

	/* Every live token is looked at, each in full: no early way out. */
	for (uint32_t i = 0; i < sv->acct->nslots; i++) {
		const struct pvgpu_reattach *t = &sv->reattach[i];
		uint64_t diff = (t->token[0] ^ req->resume_lo) |
				(t->token[1] ^ req->resume_hi);
		int live = t->fd >= 0;

		if (!diff && live)
			r = &sv->reattach[i];
	}
	if (!r) {
		snprintf(why, whylen, "resume token unknown or expired");
		return -1;
	}
	if (!same_caller(r, &p->peer, p->l)) {
		snprintf(why, whylen, "resume token of another caller's session");
		return -1;
	}
	if (!(p->conn && p->conn->fd >= 0 &&
	      (p->l->features & PVGPU_TR_REATTACH))) {
		snprintf(why, whylen, "resume over a channel that cannot carry one");
		return -1;
	}
	slot = &sv->acct->slots[r - sv->reattach];
	if (!atomic_compare_exchange_strong(&slot->detached, &want,
					    PVGPU_HANDED)) {
		if (want == PVGPU_ATTACHED || want == PVGPU_HANDED)
			return 1;	/* its worker has not seen the old one go */
		snprintf(why, whylen, "resume token of a session past its grace");
		return -1;
	}
	rc = hand_over(r, p);
	if (rc) {
		atomic_store(&slot->detached, PVGPU_DETACHED);
		snprintf(why, whylen, "session %llu's worker did not take the connection: %s",
			 (unsigned long long)slot->session_id, strerror(-rc));
		return -1;
	}
	log_debug("session %llu: %s hands its resuming connection over",
		  (unsigned long long)slot->session_id, p->peer.identity);
	return 0;
}
