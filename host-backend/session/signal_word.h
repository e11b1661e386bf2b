/*
 * signal_word.h - completion through the device's word (feature signal,
 * signal.c; not signal.h, which is the C library's).
 *
 * The guest pins a word in its control ring's first page; for a request
 * that asks (PVGPU_F_SIGNAL) and needs nothing else in its reply, the
 * worker has the device write the word after the request's work and
 * replies at once: the guest then watches the word, not the socket.
 * The worker watches it too (settle) before its next read, and sends a
 * second reply if the work failed.
 */
#ifndef PVGPU_SIGNAL_WORD_H
#define PVGPU_SIGNAL_WORD_H

#include <stdint.h>

struct pvgpu_worker;

/*
 * One session's: the word (NULL: not in use), its device address and the
 * context it was pinned in; for a request that ends this way, its stream,
 * value and opcode, and how it settled; requests that ended so (count).
 */
struct pvgpu_signal {
	uint32_t *word;
	uint64_t dptr, ctx;
	int signalled, pending, settling;
	uint64_t stream;
	uint32_t value, looks;
	uint16_t opcode;
	int32_t status;
	int nonblocking_streams;	/* a CU_STREAM_NON_BLOCKING stream was made */
	uint64_t count;
};

/*
 * wanted: this request may end that way (the guest asked, nothing else
 * must come with its reply).  queue: have the device write the word after
 * the work queued on stream; 1 when it will (the handler returns without
 * waiting; the reply says so, and the work is pending), 0 when not (the
 * handler waits as before).  settle: before the next read, until the work
 * is done or the guest moves on; a second reply if the work failed.
 */
int pvgpu_signal_wanted(const struct pvgpu_worker *w);
int pvgpu_signal_queue(struct pvgpu_worker *w, uint64_t stream);
void pvgpu_signal_settle(struct pvgpu_worker *w);

#endif /* PVGPU_SIGNAL_WORD_H */
