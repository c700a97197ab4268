/* The Chase-Lev work-stealing deque, with the C11 memory orders of Le, Pop, Cohen and Zappa
 * Nardelli (PPoPP 2013, figure 1): the owner pushes and pops at the bottom, thieves steal at the
 * top, and the two sides settle the race for the last item with a CAS on top. The array grows
 * by doubling; retired arrays stay allocated until destroy because a thief may still read one. */
#include <stdint.h>
#include <stdlib.h>

#include "base/base.h"
#include "sched/sched.h"

/* The fences below are kept for the hardware; TSan cannot model them (gcc says so with
 * -Wtsan), and the few edges it needs are given to it as release stores instead. */
#if FERRY_SCHED_TSAN && defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 11
#pragma GCC diagnostic ignored "-Wtsan"
#endif

#define DEQUE_DEFAULT_CAPACITY 64
/* 2^40 slots of 8 bytes is far past any memory: a larger request is a bug in the caller. */
#define DEQUE_MAX_INITIAL ((size_t)1 << 40)

struct deque_array {
    size_t mask;                 /* size - 1, size a power of two */
    struct deque_array *retired; /* older arrays, freed at destroy (owner-only list) */
    _Atomic(void *) slot[];
};

struct ferry_deque {
    /* top is written by thieves and bottom by the owner: keep them on separate cache lines. */
    _Alignas(64) _Atomic int64_t top;
    _Alignas(64) _Atomic int64_t bottom;
    _Atomic(struct deque_array *) array;
};

static struct deque_array *array_new(size_t size)
{
    if (size > (SIZE_MAX - sizeof(struct deque_array)) / sizeof(_Atomic(void *)))
        return NULL;
    struct deque_array *a = malloc(sizeof(struct deque_array) + size * sizeof(_Atomic(void *)));
    if (a == NULL)
        return NULL;
    a->mask = size - 1;
    a->retired = NULL;
    /* Slots are only read between top and bottom, which are always written first; no init. */
    return a;
}

int ferry__deque_create(size_t initial_capacity_pow2, ferry_deque_t **out)
{
    if (out == NULL)
        return ferry__error(FERRY_EINVAL, "deque_create: out is NULL");
    size_t cap = initial_capacity_pow2 == 0 ? DEQUE_DEFAULT_CAPACITY : initial_capacity_pow2;
    if (cap > DEQUE_MAX_INITIAL)
        return ferry__error(FERRY_EINVAL, "deque_create: capacity %zu above 2^40",
                            initial_capacity_pow2);
    size_t size = 2;
    while (size < cap)
        size <<= 1;

    ferry_deque_t *d = aligned_alloc(64, sizeof(*d));
    struct deque_array *a = d != NULL ? array_new(size) : NULL;
    if (a == NULL) {
        free(d);
        return ferry__error(FERRY_ENOMEM, "deque_create: out of memory for %zu slots", size);
    }
    atomic_init(&d->top, 0);
    atomic_init(&d->bottom, 0);
    atomic_init(&d->array, a);
    *out = d;
    return 0;
}

void ferry__deque_destroy(ferry_deque_t *d)
{
    if (d == NULL)
        return;
    struct deque_array *a = atomic_load_explicit(&d->array, memory_order_relaxed);
    while (a != NULL) {
        struct deque_array *next = a->retired;
        free(a);
        a = next;
    }
    free(d);
}

/* Owner only: double the array, copying the live range [t, b). */
static struct deque_array *grow(ferry_deque_t *d, struct deque_array *a, int64_t t, int64_t b)
{
    size_t size = (a->mask + 1) * 2;
    if (size == 0)
        return NULL;
    struct deque_array *na = array_new(size);
    if (na == NULL)
        return NULL;
    for (int64_t i = t; i < b; i++) {
        void *x = atomic_load_explicit(&a->slot[(size_t)i & a->mask], memory_order_relaxed);
        atomic_store_explicit(&na->slot[(size_t)i & na->mask], x, memory_order_relaxed);
    }
    na->retired = a;
    /* Release: a thief that loads the new array (acquire) sees the copied slots. */
    atomic_store_explicit(&d->array, na, memory_order_release);
    return na;
}

int ferry__deque_push(ferry_deque_t *d, void *item)
{
    if (item == NULL) /* NULL is how pop and steal say "empty": it would be lost */
        return ferry__error(FERRY_EINVAL, "deque_push: NULL item");
    int64_t b = atomic_load_explicit(&d->bottom, memory_order_relaxed);
    int64_t t = atomic_load_explicit(&d->top, memory_order_acquire);
    struct deque_array *a = atomic_load_explicit(&d->array, memory_order_relaxed);
    if (b - t > (int64_t)a->mask) {
        a = grow(d, a, t, b);
        if (a == NULL)
            return ferry__error(FERRY_ENOMEM, "deque_push: cannot grow past %lld items",
                                (long long)(b - t));
    }
    atomic_store_explicit(&a->slot[(size_t)b & a->mask], item, memory_order_relaxed);
    atomic_thread_fence(memory_order_release);
#if FERRY_SCHED_TSAN
    /* TSan ignores the fence above; a release store gives it the same edge to steal(). */
    atomic_store_explicit(&d->bottom, b + 1, memory_order_release);
#else
    atomic_store_explicit(&d->bottom, b + 1, memory_order_relaxed);
#endif
    return 0;
}

void *ferry__deque_pop(ferry_deque_t *d)
{
    int64_t b = atomic_load_explicit(&d->bottom, memory_order_relaxed) - 1;
    struct deque_array *a = atomic_load_explicit(&d->array, memory_order_relaxed);
    atomic_store_explicit(&d->bottom, b, memory_order_relaxed);
    /* The store to bottom must be visible before top is read: a thief does the mirror image. */
    atomic_thread_fence(memory_order_seq_cst);
    int64_t t = atomic_load_explicit(&d->top, memory_order_relaxed);
    void *x = NULL;
    if (t <= b) {
        x = atomic_load_explicit(&a->slot[(size_t)b & a->mask], memory_order_relaxed);
        if (t == b) {
            /* The last item: race the thieves for it. */
            if (!atomic_compare_exchange_strong_explicit(&d->top, &t, t + 1, memory_order_seq_cst,
                                                         memory_order_relaxed))
                x = NULL;
            atomic_store_explicit(&d->bottom, b + 1, memory_order_relaxed);
        }
    } else {
        atomic_store_explicit(&d->bottom, b + 1, memory_order_relaxed);
    }
    return x;
}

void *ferry__deque_steal(ferry_deque_t *d)
{
    int64_t t = atomic_load_explicit(&d->top, memory_order_acquire);
    atomic_thread_fence(memory_order_seq_cst);
    int64_t b = atomic_load_explicit(&d->bottom, memory_order_acquire);
    if (t >= b)
        return NULL;
    /* The paper's consume; acquire is what compilers implement it as anyway. */
    struct deque_array *a = atomic_load_explicit(&d->array, memory_order_acquire);
    void *x = atomic_load_explicit(&a->slot[(size_t)t & a->mask], memory_order_relaxed);
    if (!atomic_compare_exchange_strong_explicit(&d->top, &t, t + 1, memory_order_seq_cst,
                                                 memory_order_relaxed))
        return NULL;
    return x;
}

bool ferry__deque_is_empty(ferry_deque_t *d)
{
    int64_t t = atomic_load_explicit(&d->top, memory_order_relaxed);
    int64_t b = atomic_load_explicit(&d->bottom, memory_order_relaxed);
    return b <= t;
}
