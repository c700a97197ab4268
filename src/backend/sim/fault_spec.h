/* Fault schedules for the simulator (`--inject SPEC`): what goes wrong, and when.
 *
 *   SPEC    := ITEM (',' ITEM)*
 *   ITEM    := KIND '@' TRIGGER (':' PARAM)*
 *   KIND    := kernel | sticky | alloc | slow | share | hang | hang-hard
 *   TRIGGER := batch=N      the first kernel of batch id N (kernel, sticky)
 *            | n=K          the K-th kernel launched, allocation made or copy started (1-based)
 *            | time=DUR     the first kernel or copy that ends at or after DUR of device time
 *            | p=X          each kernel (or copy, for slow) with probability X in (0, 1]
 *   PARAM   := dev=I        any kind: on device I alone (its index in the runtime), not on all
 *            | x=F          slow: copies take F times longer (F > 1, at most 1000)
 *            | for=DUR      slow, share: for this long (default: to the end)
 *            | gbps=R       share: another process moves R GB/s on the link (0 < R <= 1000)
 *            | dir=D        share: in direction h2d (the default), d2h or both
 *   DUR     := a number with ns, us, ms or s
 *
 * kernel: the kernel fails with a non-sticky error (FERRY_EKERNEL); sticky: the kernel corrupts
 * the context, as an illegal address does (FERRY_ESTICKY from then on); hang: the kernel never
 * ends by itself but polls ferry's abort flag and stops when it is raised; hang-hard: the kernel
 * never ends at all (it ignores the flag); alloc: the allocation
 * fails as out of device memory (FERRY_EDEVMEM); slow: the link slows down; share: another
 * process starts moving data over the link (n= the K-th copy started, or time=): ferry's copies
 * get what it leaves, and the link's counter (link_rate, NVML's on a GPU) counts both. Several
 * items on one kernel: all are evaluated and the most severe that fired wins (sticky >
 * hang-hard > hang > kernel; docs/faults.md). Parsing
 * is strict:
 * anything else is an error that names the item and what is accepted. */
#ifndef FERRY_BACKEND_SIM_FAULT_SPEC_H
#define FERRY_BACKEND_SIM_FAULT_SPEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum ferry_fault_kind {
    FERRY_FAULT_KERNEL,
    FERRY_FAULT_STICKY,
    FERRY_FAULT_ALLOC,
    FERRY_FAULT_SLOW,
    FERRY_FAULT_HANG,
    FERRY_FAULT_HANG_HARD,
    FERRY_FAULT_SHARE
};
enum ferry_fault_trigger { FERRY_TRIG_BATCH, FERRY_TRIG_N, FERRY_TRIG_TIME, FERRY_TRIG_P };

#define FERRY_FAULT_MAX 32

struct ferry_fault {
    enum ferry_fault_kind kind;
    enum ferry_fault_trigger trigger;
    uint64_t value;  /* batch id, K, or time in ns */
    double p;        /* FERRY_TRIG_P */
    double factor;   /* slow */
    uint64_t for_ns; /* slow, share; 0: to the end */
    double gbps;     /* share: the other process's rate, GB/s */
    unsigned dirs;   /* share: bit 0 H2D, bit 1 D2H */
    int dev;         /* dev=: the one device it applies to; -1: every device */
    bool fired;      /* one-shot triggers fire once */
};

struct ferry_fault_spec {
    size_t n;
    struct ferry_fault f[FERRY_FAULT_MAX];
};

/* Parse @text into @out. Returns 0, or FERRY_EPARSE / FERRY_ERANGE with the error text naming
 * the item. An empty text is an empty schedule. */
int ferry__fault_spec_parse(const char *text, struct ferry_fault_spec *out);
const char *ferry__fault_kind_name(enum ferry_fault_kind k);
/* Keep the items of @spec that apply to device @index (dev= absent or equal), in order. */
void ferry__fault_spec_for_device(struct ferry_fault_spec *spec, int index);

#endif
