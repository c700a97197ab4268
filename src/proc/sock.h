/* Messages with descriptors over a SOCK_SEQPACKET unix socket: one message per call (up to two
 * pieces gathered), descriptors as SCM_RIGHTS, EINTR retried, no SIGPIPE. What the fork server
 * and the workers' sockets share. */
#ifndef FERRY_PROC_SOCK_H
#define FERRY_PROC_SOCK_H

#include <stddef.h>
#include <sys/types.h>

#define FERRY__SOCK_MAX_FDS 16

/* Send @a (@alen bytes) and @b (@blen, may be 0) as one message with @nfds descriptors (at most
 * FERRY__SOCK_MAX_FDS); @flags: 0, or MSG_DONTWAIT not to wait for room. Returns 0, or -1
 * (errno set: EAGAIN when the socket was full) when it did not go. */
int ferry__sock_send(int s, const void *a, size_t alen, const void *b, size_t blen, const int *fds,
                     unsigned nfds, int flags);

/* Receive one message: @a gets its first @alen bytes, @b (may be NULL) up to @blen more; its
 * descriptors (close-on-exec) go to @fds, at most @maxfds (the others are closed), their number
 * in *@nfds. Returns the bytes received, or -1 at the end of the stream, on an error, or when
 * the message or its descriptors did not fit (its descriptors then closed). */
ssize_t ferry__sock_recv(int s, void *a, size_t alen, void *b, size_t blen, int *fds,
                         unsigned maxfds, unsigned *nfds);

#endif
