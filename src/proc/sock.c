/* Messages with descriptors over a unix socket (sock.h). */
#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "proc/sock.h"

typedef union {
    char buf[CMSG_SPACE(sizeof(int) * FERRY__SOCK_MAX_FDS)];
    struct cmsghdr align;
} ctl_t;

int ferry__sock_send(int s, const void *a, size_t alen, const void *b, size_t blen, const int *fds,
                     unsigned nfds, int flags)
{
    if (nfds > FERRY__SOCK_MAX_FDS) {
        errno = EINVAL;
        return -1;
    }
    struct iovec iov[2] = {{.iov_base = (void *)a, .iov_len = alen},
                           {.iov_base = (void *)b, .iov_len = blen}};
    ctl_t u;
    struct msghdr m = {.msg_iov = iov, .msg_iovlen = blen > 0 ? 2 : 1};
    if (nfds > 0) {
        memset(&u, 0, sizeof(u));
        m.msg_control = u.buf;
        m.msg_controllen = CMSG_SPACE(sizeof(int) * nfds);
        struct cmsghdr *c = CMSG_FIRSTHDR(&m);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int) * nfds);
        memcpy(CMSG_DATA(c), fds, sizeof(int) * nfds);
    }
    ssize_t n;
    do
        n = sendmsg(s, &m, MSG_NOSIGNAL | flags);
    while (n < 0 && errno == EINTR);
    return n == (ssize_t)(alen + blen) ? 0 : -1;
}

ssize_t ferry__sock_recv(int s, void *a, size_t alen, void *b, size_t blen, int *fds,
                         unsigned maxfds, unsigned *nfds)
{
    struct iovec iov[2] = {{.iov_base = a, .iov_len = alen}, {.iov_base = b, .iov_len = blen}};
    ctl_t u;
    struct msghdr m = {.msg_iov = iov,
                       .msg_iovlen = b != NULL && blen > 0 ? 2 : 1,
                       .msg_control = u.buf,
                       .msg_controllen = sizeof(u.buf)};
    ssize_t n;
    do /* ECONNRESET: the peer ended with ours unread; what it sent is still there */
        n = recvmsg(s, &m, MSG_CMSG_CLOEXEC);
    while (n < 0 && (errno == EINTR || errno == ECONNRESET));
    *nfds = 0;
    for (struct cmsghdr *c = n >= 0 ? CMSG_FIRSTHDR(&m) : NULL; c != NULL; c = CMSG_NXTHDR(&m, c))
        if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
            unsigned k = (unsigned)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
            for (unsigned i = 0; i < k; i++) {
                int fd;
                memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
                if (*nfds < maxfds)
                    fds[(*nfds)++] = fd;
                else
                    close(fd);
            }
        }
    if (n <= 0 || (m.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) != 0) {
        for (unsigned i = 0; i < *nfds; i++)
            close(fds[i]);
        *nfds = 0;
        return -1;
    }
    return n;
}
