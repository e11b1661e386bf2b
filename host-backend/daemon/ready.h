/*
 * ready.h - telling whoever started pvgpud that it is listening: a test or
 * a script through --ready-fd, systemd through $NOTIFY_SOCKET (Type=notify).
 * Both are said once, after every --listen address is bound, so a caller
 * that connects then is queued, never refused.
 */
#ifndef PVGPU_READY_H
#define PVGPU_READY_H

struct pvgpu_supervisor;

/*
 * --ready-fd N: whether N is open for writing (checked before anything
 * listens, so a wrong number is a usage error, not a silent start).
 */
int pvgpu_ready_fd_ok(int fd);

/*
 * Write one line "listening URI" per listener (a tcp port 0 named as the
 * port it got) and then "ready" to fd, and close it (fd < 0: none); send
 * READY=1 where $NOTIFY_SOCKET names systemd's socket.  A reader that went
 * away changes nothing.
 */
void pvgpu_ready_say(const struct pvgpu_supervisor *sv, int fd);

#endif
